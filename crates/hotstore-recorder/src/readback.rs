//! Reading a recording back: `verify` proves every frame is intact and every link continuous,
//! and reports each gap as an exact range; `export` writes each link's frames in time order.

use crate::error::{RecorderError, Result};
use crate::frame::{self, FrameFault};
use crate::manifest::{self, Manifest, RecordingState};
use crate::slice::{self, Slice};
use hotstore::Store;
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

/// Keys listed per index query.
const KEYS_PER_QUERY: usize = 4096;

/// A run of missing frames of one link: sequence numbers `first..=last`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Gap {
    /// First missing sequence number.
    pub first: u64,
    /// Last missing sequence number.
    pub last: u64,
    /// `last - first + 1`.
    pub frames: u64,
}

/// One damaged or unexpected frame.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BadFrame {
    /// Slice index.
    pub slice: u64,
    /// Part within the slice.
    pub part: u32,
    /// Index of the frame in the slice.
    pub index: u32,
    /// What is wrong.
    pub fault: String,
}

/// What `verify` found on one link.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LinkReport {
    /// Link id.
    pub link: u16,
    /// Frames found in the store.
    pub frames: u64,
    /// Frames the manifest says are durable.
    pub manifest_frames: u64,
    /// Frames the manifest says were dropped (DRAM bound reached, or discarded).
    pub manifest_dropped: u64,
    /// Of those, frames the manifest says reached the ring but were not stored (a full store
    /// at a stop, or past a slice's last part): the ring sequence jumps over them.
    pub manifest_discarded: u64,
    /// The window's head the manifest says this link's ring no longer held (ns).
    pub manifest_head_missing_ns: u64,
    /// Ring frames skipped between stored slices (see `missing_slices`).
    pub ring_frames_skipped: u64,
    /// Frames with the generator's self-describing header (checked one by one).
    pub checked_frames: u64,
    /// First and last frame sequence number found (checked frames only).
    pub first_seq: Option<u64>,
    /// Last frame sequence number found.
    pub last_seq: Option<u64>,
    /// Missing frame sequence numbers, as exact ranges.
    pub gaps: Vec<Gap>,
    /// Frames missing in all gaps.
    pub missing_frames: u64,
    /// Damaged, misplaced or out-of-order frames.
    pub bad_frames: Vec<BadFrame>,
    /// Ring sequence discontinuities between stored slices (a slice missing from the store)
    /// that the manifest's discarded frames do not explain.
    pub missing_slices: Vec<String>,
}

/// The result of `verify`.
#[derive(Debug, Clone, Serialize)]
pub struct VerifyReport {
    /// Recording id.
    pub recording_id: u32,
    /// The manifest as read.
    pub manifest: Manifest,
    /// Slice fragments found.
    pub fragments: u64,
    /// Slice fragments that did not parse.
    pub bad_fragments: Vec<String>,
    /// Per link.
    pub links: Vec<LinkReport>,
    /// No damage, no gap, and at least what the manifest claims.
    pub intact: bool,
    /// Intact, the manifest says complete, and nothing was dropped.
    pub complete: bool,
    /// A sentence for people.
    pub verdict: String,
}

/// Walks every slice fragment of `recording` in key order (slice, link, part).
pub(crate) fn for_each_slice(
    store: &Store,
    recording: u32,
    mut f: impl FnMut(&[u8], std::result::Result<Slice<'_>, slice::BadSlice>),
) -> Result<u64> {
    let mut from = slice::key(recording, 0, 0, 0).to_vec();
    let to = slice::key(recording.wrapping_add(1), 0, 0, 0);
    let to = (recording != u32::MAX).then_some(&to[..]);
    let mut n = 0;
    loop {
        let keys = store.range_keys(&from, to, KEYS_PER_QUERY);
        for (k, _) in &keys {
            // A damaged record is reported as a bad slice; the walk goes on.
            if let Err(e) = store.get_with(k, |v| f(k, Slice::parse(v))) {
                f(k, Err(slice::BadSlice(format!("cannot read: {e}"))));
            }
            n += 1;
        }
        match keys.last() {
            Some((k, _)) if keys.len() == KEYS_PER_QUERY => {
                from = k.clone();
                from.push(0);
            }
            _ => return Ok(n),
        }
    }
}

struct LinkWalk {
    report: LinkReport,
    next_ring: Option<u64>,
}

/// Verifies recording `recording` of the store (see the module docs).
pub fn verify(store: &Store, recording: u32) -> Result<VerifyReport> {
    let m = manifest::read(store.dir(), recording)?;
    let mut walks: BTreeMap<u16, LinkWalk> = m
        .links
        .iter()
        .map(|l| {
            (
                l.link,
                LinkWalk {
                    report: LinkReport {
                        link: l.link,
                        manifest_frames: l.frames_recorded,
                        manifest_dropped: l.frames_dropped,
                        manifest_discarded: l.frames_discarded,
                        manifest_head_missing_ns: l.head_missing_ns,
                        ..Default::default()
                    },
                    next_ring: None,
                },
            )
        })
        .collect();
    let mut bad_fragments = Vec::new();
    let fragments = for_each_slice(store, recording, |key, parsed| {
        let s = match parsed {
            Ok(s) => s,
            Err(e) => {
                bad_fragments.push(format!("{}: {}", hex::encode(key), e.0));
                return;
            }
        };
        let h = s.header;
        let w = walks.entry(h.link).or_insert_with(|| LinkWalk {
            report: LinkReport {
                link: h.link,
                ..Default::default()
            },
            next_ring: None,
        });
        let r = &mut w.report;
        if let Some(expected) = w.next_ring {
            if h.first_ring != expected {
                r.ring_frames_skipped += h.first_ring.abs_diff(expected);
                r.missing_slices.push(format!(
                    "slice {} part {}: ring frames {}..{} are not in the store",
                    h.slice, h.part, expected, h.first_ring
                ));
            }
        }
        w.next_ring = Some(h.first_ring + h.frames as u64);
        r.frames += h.frames as u64;
        for i in 0..h.frames as usize {
            let bad = |fault: String| BadFrame {
                slice: h.slice,
                part: h.part,
                index: i as u32,
                fault,
            };
            let fr = s.frame(i);
            let fh = match frame::check(fr) {
                Ok(fh) => fh,
                Err(FrameFault::NotAFrame) => continue,
                Err(e) => {
                    r.bad_frames.push(bad(format!("{e:?}")));
                    continue;
                }
            };
            r.checked_frames += 1;
            if fh.link != h.link {
                r.bad_frames.push(bad(format!(
                    "frame of link {} stored under link {}",
                    fh.link, h.link
                )));
            }
            if fh.ts_ns != s.ts(i) {
                r.bad_frames
                    .push(bad("timestamp differs from the slice's table".into()));
            }
            match r.last_seq {
                Some(last) if fh.seq == last + 1 => {}
                Some(last) if fh.seq > last + 1 => {
                    let g = Gap {
                        first: last + 1,
                        last: fh.seq - 1,
                        frames: fh.seq - 1 - last,
                    };
                    r.missing_frames += g.frames;
                    r.gaps.push(g);
                }
                Some(last) => r.bad_frames.push(bad(format!(
                    "sequence {} after {} (duplicate or out of order)",
                    fh.seq, last
                ))),
                None => r.first_seq = Some(fh.seq),
            }
            r.last_seq = Some(fh.seq.max(r.last_seq.unwrap_or(0)));
        }
    })?;
    let mut links: Vec<LinkReport> = walks.into_values().map(|w| w.report).collect();
    for l in &mut links {
        // Frames the writer discarded (counted in the manifest) leave a jump in the ring
        // sequence: not damage when the manifest accounts for every skipped frame.
        if l.ring_frames_skipped <= l.manifest_discarded {
            l.missing_slices.clear();
        }
    }
    let short: Vec<String> = links
        .iter()
        .filter(|l| l.frames < l.manifest_frames)
        .map(|l| {
            format!(
                "link {}: the manifest says {} frames are durable, the store holds {}",
                l.link, l.manifest_frames, l.frames
            )
        })
        .collect();
    let damaged = links
        .iter()
        .any(|l| !l.bad_frames.is_empty() || !l.missing_slices.is_empty())
        || !bad_fragments.is_empty();
    let gaps: u64 = links.iter().map(|l| l.missing_frames).sum();
    let intact = !damaged && short.is_empty() && gaps == 0;
    let complete = intact && m.state == RecordingState::Complete && !m.lossy;
    let verdict = if complete {
        format!(
            "recording {recording} is complete and intact: {} frames on {} links, no gap",
            m.frames_recorded(),
            links.len()
        )
    } else {
        let mut why = Vec::new();
        match m.state {
            RecordingState::Complete => {}
            RecordingState::Empty => why.push(
                "the manifest says Empty: the window ended and not one frame of it is stored"
                    .into(),
            ),
            RecordingState::Truncated if m.interrupted => why.push(format!(
                "the manifest says Truncated: its recorder stopped without closing it (killed or crashed), durable up to slice {} on every link",
                m.slices_durable
            )),
            _ => why.push(format!(
                "the manifest says {:?} (stopped at slice {} on every link)",
                m.state, m.slices_durable
            )),
        }
        if m.lossy {
            let discarded = m.frames_discarded();
            let mut lost = Vec::new();
            let at_bound = m.frames_dropped().saturating_sub(discarded);
            if at_bound > 0 {
                lost.push(format!("{at_bound} frames were dropped at the DRAM bound"));
            }
            if discarded > 0 {
                lost.push(format!(
                    "{discarded} frames reached the recorder but were discarded"
                ));
            }
            for l in m.links.iter().filter(|l| l.head_missing_ns > 0) {
                lost.push(format!(
                    "link {}: the first {:.3} ms of the window were no longer in its ring",
                    l.link,
                    l.head_missing_ns as f64 / 1e6
                ));
            }
            if !m.silent_links.is_empty() {
                lost.push(format!(
                    "no frame inside the window arrived from link(s) {:?}",
                    m.silent_links
                ));
            }
            if m.trigger_head_missing_ns > 0 {
                lost.push(format!(
                    "{:.3} ms of a trigger's window lie before the recording and in none",
                    m.trigger_head_missing_ns as f64 / 1e6
                ));
            }
            why.push(format!("lossy: {}", lost.join(", ")));
        }
        why.extend(m.notes.iter().map(|n| format!("note: {n}")));
        if gaps > 0 {
            why.push(format!("{gaps} frames missing in gaps"));
        }
        if damaged {
            why.push("damaged or missing data".into());
        }
        why.extend(short);
        format!("recording {recording} is NOT complete: {}", why.join("; "))
    };
    Ok(VerifyReport {
        recording_id: recording,
        manifest: m,
        fragments,
        bad_fragments,
        links,
        intact,
        complete,
        verdict,
    })
}

/// Writes each link's frames of `recording`, in time order, to `out/link-NNNN.bin` (raw
/// frames back to back). Returns (link, frames, path) per link.
pub fn export(
    store: &Store,
    recording: u32,
    out: &Path,
) -> Result<Vec<(u16, u64, std::path::PathBuf)>> {
    manifest::read(store.dir(), recording)?;
    let io = |what: &'static str, p: &Path| {
        let p = p.to_path_buf();
        move |e| RecorderError::Io {
            what,
            path: p,
            source: e,
        }
    };
    std::fs::create_dir_all(out).map_err(io("create", out))?;
    let mut files: BTreeMap<u16, (std::io::BufWriter<std::fs::File>, u64, std::path::PathBuf)> =
        BTreeMap::new();
    let mut err: Option<RecorderError> = None;
    for_each_slice(store, recording, |key, parsed| {
        if err.is_some() {
            return;
        }
        let s = match parsed {
            Ok(s) => s,
            Err(e) => {
                err = Some(RecorderError::BadManifest {
                    path: store.dir().to_path_buf(),
                    reason: format!(
                        "slice {}: {} (run `hotstore record verify`)",
                        hex::encode(key),
                        e.0
                    ),
                });
                return;
            }
        };
        let link = s.header.link;
        if let std::collections::btree_map::Entry::Vacant(slot) = files.entry(link) {
            let path = out.join(format!("link-{link:04}.bin"));
            match std::fs::File::create(&path) {
                Ok(f) => {
                    slot.insert((std::io::BufWriter::with_capacity(1 << 20, f), 0, path));
                }
                Err(e) => {
                    err = Some(RecorderError::Io {
                        what: "create",
                        path,
                        source: e,
                    });
                    return;
                }
            }
        }
        let (w, n, path) = files.get_mut(&link).expect("inserted above when missing");
        if let Err(e) = w.write_all(s.frames_bytes()) {
            err = Some(RecorderError::Io {
                what: "write",
                path: path.clone(),
                source: e,
            });
        }
        *n += s.header.frames as u64;
    })?;
    if let Some(e) = err {
        return Err(e);
    }
    let mut done = Vec::new();
    for (link, (mut w, n, path)) in files {
        w.flush().map_err(io("write", &path))?;
        done.push((link, n, path));
    }
    Ok(done)
}
