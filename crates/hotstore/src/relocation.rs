//! Which segments to relocate: the cost-benefit rule of log-structured file systems, applied to
//! groups of segments that must be freed together.
//!
//! A segment can be freed only when all its records are dead *and* it shadows nothing still on
//! disk (its pins, see `Segment::pin_on`). So the unit of relocation is a *group*: a segment
//! with every segment it pins on, transitively (the oldest segments have none, so most groups
//! are one segment; segments written at the same time by two lanes that overwrite or remove
//! each other's keys pin each other and form a group of two). Moving the group's live records
//! elsewhere frees all its files.
//!
//! **The rule** (Rosenblum and Ousterhout, "The Design and Implementation of a Log-Structured
//! File System", 1992): relocate the group with the highest
//!
//! ```text
//!   benefit / cost = (1 - u) * age / (1 + u)
//! ```
//!
//! where `u` is the group's live fraction (live bytes over file bytes), `1 - u` the space it
//! gives back, `1 + u` the cost (read the group once, write its live part), and `age` how long
//! ago its youngest member was written, counted in segments written since (a logical clock: no
//! wall time, so the choice is the same on a fast and a slow machine). Age matters because cold
//! data stays put: a segment of cold data that is 70% dead will not die further, so it is worth
//! cleaning now, while a hot segment at 70% dead is best left to die on its own. Picking by
//! `u` alone (greedy) relocates hot data again and again.
//!
//! **Offload** (moving data to the next tier down) uses the same groups but picks the oldest
//! first (a DAQ buffer wants its newest events on the fast tier; oldest-first is also what
//! makes an event's fragments move close together in time).

/// What the policy knows of one segment.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// Segment id (ids grow with time: a lower id is older).
    pub id: u64,
    /// Tier index.
    pub tier: usize,
    /// Bytes of the file.
    pub file_bytes: u64,
    /// Bytes of live records (what relocation must copy).
    pub live_bytes: u64,
    /// Length of its largest record.
    pub max_record_bytes: u64,
    /// Live records (with `live_bytes`, their average length).
    pub live_records: u64,
    /// Ids of the segments this one pins on (it must outlive them).
    pub targets: Vec<u64>,
    /// A lane appends to it: it must be sealed before it is relocated.
    pub active: bool,
    /// It cannot be relocated now (a relocation lane writes to it, or it is being freed).
    pub excluded: bool,
    /// It holds only puts: once dead it is freed whatever it pins (its pins pass to its
    /// holders), so it is a group by itself.
    pub only_puts: bool,
    /// Bytes of its records other than puts: what moving it alone copies forward.
    pub shadow_bytes: u64,
}

/// A group chosen for relocation.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    /// Members, oldest first.
    pub ids: Vec<u64>,
    /// Bytes to copy.
    pub live_bytes: u64,
    /// Bytes of files freed.
    pub file_bytes: u64,
    /// One member moved alone although it pins segments outside the group: its records other
    /// than puts (tombstones, event removals and marks) are copied forward with their lsn, and
    /// their new segment pins what it pinned, so it may go first.
    pub forward: bool,
}

/// Most segments in one group. Dead members cost nothing to move (only live bytes are copied,
/// and those are bounded by the rule's budget), and a chain of dead segments that ends on one
/// live segment is one group however long (two lanes removing each other's keys build such
/// chains: a bound of 16 wedged a busy bounded store with a chain of 22). This bound only
/// keeps one step's bookkeeping finite.
pub const MAX_GROUP: usize = 4096;

/// How to choose.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    /// Room relocation can write to now: the group's live bytes, plus what packing them into
    /// files may leave unused (see [`room_to_move`]), must fit.
    pub budget_bytes: u64,
    /// Most live bytes the group may copy: the background sweep's pace (u64::MAX: none).
    /// Kept apart from `budget_bytes` because `room_to_move` adds packing slack that is room,
    /// not copying: compared with one 64 MiB pace, it kept a full 64 MiB segment of large
    /// records from ever offloading.
    pub pace_bytes: u64,
    /// Record bytes one file holds (a segment less its header page).
    pub file_record_bytes: u64,
    /// Only groups with at most this live fraction (background cleaning leaves mostly-live
    /// segments alone; under pressure anything that frees space qualifies).
    pub max_live_fraction: f64,
    /// Groups with active members qualify (they are sealed first).
    pub allow_active: bool,
    /// Oldest first (offload) instead of cost-benefit (cleaning).
    pub oldest_first: bool,
    /// Only groups whose members are all on this tier.
    pub tier: Option<usize>,
    /// The newest segment id (for ages).
    pub newest_id: u64,
    /// Only groups that give back at least this many bytes (file bytes minus live bytes):
    /// moving a nearly full segment gains nothing and, repeated, would never end.
    pub min_gain_bytes: u64,
    /// Only groups whose members all have ids below this (a compaction takes the segments
    /// that existed when it started, not the ones it writes).
    pub below_id: u64,
    /// Count the gain as what the group's records leave once packed into new files (see
    /// [`room_taken`]); off: file bytes less live bytes (a removal's request for room takes
    /// any group that frees more than two header pages, as it always did).
    pub count_packing: bool,
    /// When no group qualifies, a segment whose group is too large may go alone, its records
    /// other than puts copied forward (a request for room sets it: the copies cost writes and
    /// records that later relocations copy again, so only a store that would otherwise answer
    /// full pays them).
    pub forward_if_stuck: bool,
    /// With `forward_if_stuck`: a segment offered alone goes before the groups (a request for
    /// room whose moves of groups made none; see `Inner::make_room`).
    pub prefer_forward: bool,
}

/// Room that moving `live` bytes of records (each at most `max_record` bytes) needs at worst:
/// records do not span files, so the lane's tail and each new file of `file_record_bytes` may
/// end with up to a record's length unused. Fix (issue 15, kill -9 wedge): the budget used to
/// be compared with the live bytes alone, so a group could run out of room half-moved, having
/// spent the reserve without freeing anything.
///
/// It is also at most `2 * live`, plus the last file's room, plus a page and a header page per
/// record too large for a standard file: a file is left only for a record that does not fit
/// its tail, so what the files left behind leave unused is less than the records that left
/// them; the last file is taken whole; a record too large for a standard file gets a file of
/// its own (`Inner::file_len_for`), its length rounded up to a page.
/// Fix (`bench pipeline --image 256x256x64 --chunk 128x128x32`): records larger than a
/// standard file (1 MiB chunks in the 1 MiB segments fitted to a 16 MiB memory tier) made
/// the first bound divide by 1, asked for terabytes, and were never offloaded: they stayed
/// on the volatile tier for good.
pub fn room_to_move(live: u64, max_record: u64, file_record_bytes: u64) -> u64 {
    if live == 0 {
        return 0;
    }
    let per_file = file_record_bytes.saturating_sub(max_record).max(1);
    let packed = live.saturating_add((1 + live.div_ceil(per_file)).saturating_mul(max_record));
    let own_files = live / file_record_bytes.max(1);
    let page = 4096;
    let either = (2 * live)
        .saturating_add(file_record_bytes)
        .saturating_add(own_files.saturating_mul(page + crate::segment::SEGMENT_HEADER_LEN as u64));
    packed.min(either)
}

/// Room that `live` bytes of records of `record` bytes on average take once moved into files
/// of `file_record_bytes`: each file they fill may end with up to a record's length unused.
/// What a group gives back is its file bytes less this, not less its live bytes. The average
/// live record, not the largest record ever written: one large dead record must not make a
/// segment of small live ones look unmovable.
/// Fix (full-disk campaign on ext4): files of 1 MiB records seven to a file, each 0.95 MiB
/// short of full, passed the minimum gain by `file - live`, but their records packed seven
/// to a file again: a request for room moved 256 of them (1.9 GB) and gained nothing.
pub fn room_taken(live: u64, record: u64, file_record_bytes: u64) -> u64 {
    let per_file = file_record_bytes.saturating_sub(record).max(1);
    live.saturating_add(live.div_ceil(per_file).saturating_mul(record))
}

/// What moving a group of `members` (`live` of `file` bytes) gives back under `rule`.
fn gain(members: &[&Candidate], live: u64, file: u64, rule: &Rule) -> u64 {
    if !rule.count_packing {
        return file.saturating_sub(live);
    }
    let records: u64 = members.iter().map(|m| m.live_records).sum();
    file.saturating_sub(room_taken(
        live,
        live.div_ceil(records.max(1)),
        rule.file_record_bytes,
    ))
}

/// The group to relocate next under `rule`, or `None` if none qualifies.
///
/// With [`Rule::forward_if_stuck`], when no group qualifies, a segment whose group is too
/// large to move (more live bytes than the room, or the pace, or more than [`MAX_GROUP`]
/// members) is offered alone, with `forward` set: its records other than puts are then copied
/// forward. Fix (kill -9 campaign, twentieth session): with values of half a segment or more,
/// removals chained 20-48 segments into one group, no group fitted, and puts found the store
/// full at 27-68% of `guaranteed_live_bytes`.
/// Fix (`stress --max-value 4MiB --capacity 128MiB`, alternated 15 s runs): offered beside the
/// groups in every sweep, forwarding won on score, relocated 3.2x the records and 1.4x the
/// bytes, and cost 17% of the ops/s; only a store that has nothing else to move now pays it.
pub fn choose(cands: &[Candidate], rule: &Rule) -> Option<Choice> {
    use std::collections::{BTreeSet, HashMap};
    let by_id: HashMap<u64, &Candidate> = cands.iter().map(|c| (c.id, c)).collect();
    // [regular groups, segments alone with their shadows forwarded]
    let mut best: [Option<(f64, Choice)>; 2] = [None, None];
    let mut seen_groups: BTreeSet<Vec<u64>> = BTreeSet::new();
    let mut consider = |ids: Vec<u64>, forward: bool| {
        let members: Vec<&Candidate> = ids.iter().map(|i| by_id[i]).collect();
        if let Some((score, choice)) = assess(&members, forward, rule) {
            let best = &mut best[usize::from(forward)];
            if best.as_ref().is_none_or(|(s, _)| score > *s) {
                *best = Some((score, Choice { ids, ..choice }));
            }
        }
    };
    for c in cands {
        let group = group_of(c.id, &by_id);
        let too_large = group.as_ref().is_none_or(|ids| {
            let members: Vec<&Candidate> = ids.iter().map(|i| by_id[i]).collect();
            !fits(&members, 0, rule)
        });
        if let Some(ids) = group {
            if seen_groups.insert(ids.clone()) {
                consider(ids, false);
            }
        }
        if rule.forward_if_stuck && too_large && !c.only_puts && !c.targets.is_empty() {
            consider(vec![c.id], true);
        }
    }
    let [regular, forward] = best;
    if rule.prefer_forward {
        forward.or(regular)
    } else {
        regular.or(forward)
    }
    .map(|(_, c)| c)
}

/// True if moving `members` (and `extra` bytes copied forward) fits the room and the pace.
fn fits(members: &[&Candidate], extra: u64, rule: &Rule) -> bool {
    let live: u64 = members.iter().map(|m| m.live_bytes).sum::<u64>() + extra;
    let max_record = members
        .iter()
        .map(|m| m.max_record_bytes)
        .max()
        .unwrap_or(0);
    room_to_move(live, max_record, rule.file_record_bytes) <= rule.budget_bytes
        && live <= rule.pace_bytes
}

/// The score and choice of moving `members` under `rule` (`forward`: one member, its records
/// other than puts copied forward), or `None` if it does not qualify.
fn assess(members: &[&Candidate], forward: bool, rule: &Rule) -> Option<(f64, Choice)> {
    if members.iter().any(|m| {
        m.excluded
            || m.id >= rule.below_id
            || (m.active && !rule.allow_active)
            || rule.tier.is_some_and(|t| m.tier != t)
    }) {
        return None;
    }
    let extra = if forward {
        members.iter().map(|m| m.shadow_bytes).sum()
    } else {
        0
    };
    let live: u64 = members.iter().map(|m| m.live_bytes).sum::<u64>() + extra;
    let file: u64 = members.iter().map(|m| m.file_bytes).sum();
    if file == 0
        || !fits(members, extra, rule)
        || (!rule.oldest_first && gain(members, live, file, rule) < rule.min_gain_bytes.max(1))
    {
        return None;
    }
    let u = live as f64 / file as f64;
    if u > rule.max_live_fraction {
        return None;
    }
    let youngest = members.iter().map(|m| m.id).max().unwrap_or(0);
    let age = rule.newest_id.saturating_sub(youngest) as f64 + 1.0;
    let score = if rule.oldest_first {
        -(members[0].id as f64)
    } else {
        (1.0 - u) * age / (1.0 + u)
    };
    Some((
        score,
        Choice {
            ids: Vec::new(),
            live_bytes: live,
            file_bytes: file,
            forward,
        },
    ))
}

/// `id` with every segment it pins on, transitively, oldest first (`id` alone if it holds
/// only puts: it is freed whatever it pins); `None` if a member is
/// unknown (gone meanwhile) or the group is larger than [`MAX_GROUP`].
fn group_of(id: u64, by_id: &std::collections::HashMap<u64, &Candidate>) -> Option<Vec<u64>> {
    let mut group = vec![id];
    let mut members = std::collections::HashSet::from([id]);
    let mut i = 0;
    if by_id.get(&id)?.only_puts {
        // Freed on its own once its records have moved (`Segment::is_reclaimable`).
        return Some(group);
    }
    while i < group.len() {
        for t in &by_id.get(&group[i])?.targets {
            if !members.contains(t) {
                if !by_id.contains_key(t) || group.len() == MAX_GROUP {
                    return None;
                }
                members.insert(*t);
                group.push(*t);
            }
        }
        i += 1;
    }
    group.sort_unstable();
    Some(group)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(id: u64, live: u64, targets: &[u64]) -> Candidate {
        Candidate {
            id,
            tier: 0,
            file_bytes: 100,
            live_bytes: live,
            max_record_bytes: 0,
            live_records: live,
            targets: targets.to_vec(),
            active: false,
            excluded: false,
            only_puts: false,
            shadow_bytes: 0,
        }
    }

    fn rule() -> Rule {
        Rule {
            budget_bytes: 1000,
            pace_bytes: u64::MAX,
            file_record_bytes: 100,
            max_live_fraction: 1.0,
            allow_active: false,
            oldest_first: false,
            tier: None,
            newest_id: 100,
            min_gain_bytes: 1,
            below_id: u64::MAX,
            count_packing: true,
            forward_if_stuck: true,
            prefer_forward: false,
        }
    }

    #[test]
    fn cold_half_dead_beats_hot_mostly_dead() {
        // Segment 1 is old and half dead; 99 is new and 80% dead: cost-benefit takes the
        // cold one ((0.5 * 100) / 1.5 = 33 against (0.8 * 2) / 1.2 = 1.3); greedy would not.
        let c = choose(&[seg(1, 50, &[]), seg(99, 20, &[])], &rule()).unwrap();
        assert_eq!(c.ids, vec![1]);
    }

    #[test]
    fn groups_follow_pins_and_cycles() {
        // 5 pins on 4, 4 pins on 5 (a cycle), 6 pins on 5: 6's group is all three.
        let cands = [seg(4, 10, &[5]), seg(5, 10, &[4]), seg(6, 90, &[5])];
        let by: std::collections::HashMap<u64, &Candidate> =
            cands.iter().map(|c| (c.id, c)).collect();
        assert_eq!(group_of(6, &by), Some(vec![4, 5, 6]));
        assert_eq!(group_of(4, &by), Some(vec![4, 5]));
        let c = choose(&cands, &rule()).unwrap();
        assert_eq!(c.ids, vec![4, 5]);
        assert_eq!((c.live_bytes, c.file_bytes), (20, 200));
    }

    #[test]
    fn a_segment_whose_group_is_too_large_is_offered_alone_with_its_shadows() {
        // 9 (dead, 6 bytes of tombstones) pins on 8 and 7, which hold 90 live bytes each: the
        // group needs more than the budget, so 9 is offered alone, its tombstones copied.
        let mut dead = seg(9, 0, &[8, 7]);
        dead.shadow_bytes = 6;
        let cands = [seg(7, 90, &[]), seg(8, 90, &[]), dead];
        let mut r = rule();
        r.budget_bytes = 150;
        // 7 or 8 alone would give back too little.
        r.min_gain_bytes = 20;
        let c = choose(&cands, &r).unwrap();
        assert_eq!((c.ids.clone(), c.forward, c.live_bytes), (vec![9], true, 6));
        // Not without `forward_if_stuck` (a background sweep).
        r.forward_if_stuck = false;
        assert_eq!(choose(&cands, &r), None);
        r.forward_if_stuck = true;
        // A group that qualifies goes first, though moving 9 alone would score higher: an
        // old half-live segment (score 0.5 * 91 / 1.5 = 30 against 9's 0.94 * 91 / 1.06 = 81).
        let with_regular = [
            seg(7, 90, &[]),
            seg(8, 90, &[]),
            seg(9, 0, &[8, 7]),
            seg(10, 50, &[]),
        ];
        let c = choose(&with_regular, &r).unwrap();
        assert_eq!((c.ids, c.forward), (vec![10], false));
        // ... unless moving groups made no room: then 9 goes first.
        r.prefer_forward = true;
        let c = choose(&with_regular, &r).unwrap();
        assert_eq!((c.ids, c.forward), (vec![9], true));
        r.prefer_forward = false;
        // With room for the whole group, the group goes, and nothing is copied.
        r.budget_bytes = 1000;
        let c = choose(&cands, &r).unwrap();
        assert_eq!((c.ids, c.forward), (vec![7, 8, 9], false));
    }

    #[test]
    fn budget_live_fraction_active_and_excluded_are_respected() {
        let mut r = rule();
        r.budget_bytes = 40;
        assert_eq!(
            choose(&[seg(1, 50, &[]), seg(2, 30, &[])], &r).unwrap().ids,
            vec![2]
        );
        r.max_live_fraction = 0.2;
        assert!(choose(&[seg(1, 50, &[]), seg(2, 30, &[])], &r).is_none());
        let mut a = seg(3, 0, &[]);
        a.active = true;
        assert!(choose(std::slice::from_ref(&a), &rule()).is_none());
        let mut allow = rule();
        allow.allow_active = true;
        assert_eq!(
            choose(std::slice::from_ref(&a), &allow).unwrap().ids,
            vec![3]
        );
        let mut x = seg(4, 0, &[]);
        x.excluded = true;
        assert!(choose(&[x], &allow).is_none());
        // Fully live: nothing to gain.
        assert!(choose(&[seg(5, 100, &[])], &allow).is_none());
        // Too little to gain, or too new.
        let mut gain = rule();
        // 100 B files: 90 live bytes take 91 once moved (a record's length of packing slack).
        gain.min_gain_bytes = 15;
        assert!(choose(&[seg(7, 90, &[])], &gain).is_none());
        assert_eq!(choose(&[seg(7, 80, &[])], &gain).unwrap().ids, vec![7]);
        gain.below_id = 7;
        assert!(choose(&[seg(7, 80, &[])], &gain).is_none());
        // A pin on a segment the policy does not know (gone): its group is unknown, so it
        // may only be moved alone, its shadows copied forward.
        let alone = choose(&[seg(6, 0, &[77])], &allow).unwrap();
        assert_eq!((alone.ids, alone.forward), (vec![6], true));
    }

    #[test]
    fn offload_takes_the_oldest() {
        let mut r = rule();
        r.oldest_first = true;
        let c = choose(&[seg(9, 10, &[]), seg(3, 90, &[]), seg(5, 0, &[])], &r).unwrap();
        assert_eq!(c.ids, vec![3]);
    }

    #[test]
    fn room_to_move_counts_what_packing_may_leave_unused() {
        assert_eq!(room_to_move(0, 50, 100), 0);
        // One record: at worst the tail is too short for it, and it goes to a new file.
        assert_eq!(room_to_move(50, 50, 100), 50 + 2 * 50);
        // Small records waste little.
        assert_eq!(room_to_move(1000, 1, 100), 1000 + 1 + 11);
        // A group whose live bytes fit the budget, but not once packed, is not chosen.
        let mut c = seg(1, 60, &[]);
        c.max_record_bytes = 30;
        let mut r = rule();
        r.budget_bytes = 100;
        assert!(choose(&[c.clone()], &r).is_none());
        r.budget_bytes = 60 + (1 + 1) * 30 + 20;
        assert!(choose(&[c], &r).is_some());
    }

    /// The gain counts how the live records pack, by their average length: segments of large
    /// records that pack no tighter elsewhere are not worth moving, a segment of small live
    /// records beside one large dead record is.
    #[test]
    fn gain_counts_how_live_records_pack() {
        let mut r = rule();
        r.file_record_bytes = 1000;
        r.budget_bytes = 10_000;
        r.min_gain_bytes = 60;
        // Six live records of 150 B in a file of 1000: 100 B unused, but six to a file again.
        let mut big = seg(1, 900, &[]);
        big.file_bytes = 1000;
        big.live_records = 6;
        big.max_record_bytes = 150;
        assert_eq!(choose(&[big.clone()], &r), None);
        // 500 B of 10 B live records; a 400 B record that died.
        let mut mixed = big;
        mixed.live_bytes = 500;
        mixed.live_records = 50;
        mixed.max_record_bytes = 400;
        assert!(choose(&[mixed], &r).is_some());
    }

    #[test]
    fn room_to_move_of_records_larger_than_a_file_is_bounded() {
        const MIB: u64 = 1 << 20;
        let hdr = crate::segment::SEGMENT_HEADER_LEN as u64;
        // A 1 MiB record (plus its header and key) and files of 1 MiB less a header page:
        // it goes to a file of its own, at most a page and a header page more than itself.
        let rec = MIB + 40;
        let room = room_to_move(rec, rec, MIB - hdr);
        assert!(room >= rec + 4096 + hdr, "{room}");
        assert!(room <= 3 * rec + 4096 + hdr, "{room}");
        // Records just under a file's length: each may take a file, at most twice the bytes.
        assert!(room_to_move(10 * MIB, MIB - 8192, MIB) <= 21 * MIB + 10 * (4096 + hdr));
        // Small records keep the tight bound.
        assert_eq!(room_to_move(1000, 1, 100), 1000 + 1 + 11);
    }
}
