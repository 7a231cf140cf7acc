//! Metrics: counters and latency histograms kept on the hot path (atomic adds, no lock),
//! rendered in the Prometheus text format 0.0.4 (`text`) and served over plain HTTP on
//! `--metrics-port`. docs/protocol.md lists every family.
//!
//! Depends on no other module of the server: the command names, the figures read at a scrape
//! and the page to serve are handed in by the caller.

mod process;
mod text;

use hotstore::Stats;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use text::{Kind, Page};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::watch;

/// A counter; clones share the count.
#[derive(Clone, Default, Debug)]
pub struct Counter(Arc<AtomicU64>);

impl Counter {
    /// Adds one.
    pub fn inc(&self) {
        self.inc_by(1);
    }

    /// Adds `n`.
    pub fn inc_by(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    /// The count.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A histogram over integer observations (nanoseconds, or plain counts) with fixed bucket
/// bounds: one binary search and two atomic adds per observation.
pub struct Histogram {
    /// Upper bounds (inclusive), in the observations' unit, ascending.
    limits: &'static [u64],
    /// Non-cumulative counts: one per bound, then the overflow (+Inf) bucket.
    counts: Box<[AtomicU64]>,
    /// Sum of the observations, in their unit.
    sum: AtomicU64,
    /// Observation units per exposed unit (1e9 for nanoseconds shown as seconds).
    per_unit: f64,
}

/// Duration buckets, in ns: 1 µs to 8.4 s, doubling (24 bounds), from a cached read to a
/// stalled disk.
const DURATION_NS: [u64; 24] = {
    let mut b = [0u64; 24];
    let mut i = 0;
    while i < 24 {
        b[i] = 1000 << i;
        i += 1;
    }
    b
};

/// Batch-size buckets: 1 to 4096 requests, doubling.
const BATCH: [u64; 13] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096];

impl Histogram {
    fn new(limits: &'static [u64], per_unit: f64) -> Histogram {
        Histogram {
            limits,
            counts: (0..=limits.len()).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0),
            per_unit,
        }
    }

    /// A histogram of durations, exposed in seconds.
    pub fn durations() -> Histogram {
        Histogram::new(&DURATION_NS, 1e9)
    }

    /// A histogram of batch sizes.
    pub fn sizes() -> Histogram {
        Histogram::new(&BATCH, 1.0)
    }

    /// Records `v` (in the histogram's unit).
    pub fn observe(&self, v: u64) {
        let i = self.limits.partition_point(|&b| b < v);
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(v, Ordering::Relaxed);
    }

    /// Records a duration (for a histogram of durations).
    pub fn observe_duration(&self, d: Duration) {
        self.observe(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    }

    fn len(&self) -> usize {
        self.limits.len()
    }

    /// The bucket bounds in the exposed unit (a division: 1000 / 1e9 is exactly the f64 that
    /// `1e-6` names, so the `le` labels read as written).
    fn bounds(&self) -> impl Iterator<Item = f64> + '_ {
        self.limits.iter().map(|&b| b as f64 / self.per_unit)
    }

    fn bucket(&self, i: usize) -> u64 {
        self.counts[i].load(Ordering::Relaxed)
    }

    fn sum(&self) -> f64 {
        self.sum.load(Ordering::Relaxed) as f64 / self.per_unit
    }
}

/// What the group commit records; the sync thread holds a clone.
#[derive(Clone)]
pub struct GroupCommitMetrics {
    /// Group commits done.
    pub syncs: Counter,
    /// Requests covered by group commits.
    pub requests: Counter,
    /// Time of each commit's sync.
    duration: Arc<Histogram>,
    /// Requests (connections' reply batches) each commit covered.
    batch: Arc<Histogram>,
}

impl GroupCommitMetrics {
    /// Records one group commit that took `took` and covered `requests` waiting requests.
    pub fn commit(&self, took: Duration, requests: usize) {
        self.syncs.inc();
        self.requests.inc_by(requests as u64);
        self.duration.observe_duration(took);
        self.batch.observe(requests as u64);
    }
}

/// One command's figures, made at its first use so that commands never used have no series.
struct CommandStats {
    calls: Counter,
    latency: Histogram,
}

/// Error kinds counted (see `error::error_kind`).
const ERROR_KINDS: [&str; 11] = [
    "protocol",
    "request",
    "auth",
    "full",
    "late",
    "claimlost",
    "noevent",
    "acked",
    "nogroup",
    "io",
    "cluster",
];

/// The server's metrics.
pub struct Metrics {
    names: Vec<String>,
    commands: Box<[OnceLock<CommandStats>]>,
    errors: [Counter; ERROR_KINDS.len()],
    /// Bytes read from clients.
    pub bytes_in: Counter,
    /// Bytes written to clients.
    pub bytes_out: Counter,
    /// Connections accepted.
    pub connections_total: Counter,
    /// Requests run while the store was short of room, on a thread of their own
    /// (`block_in_place`), so that waiting for relocation held no other connection.
    pub off_worker: Counter,
    /// Group commits done (also in `group_commit`).
    pub syncs: Counter,
    /// Requests covered by group commits (also in `group_commit`).
    pub synced_requests: Counter,
    group_commit: GroupCommitMetrics,
    /// Time a connection's replies waited for their group commit (queue and sync).
    durability_wait: Histogram,
}

/// Figures read at a scrape from outside this module.
pub struct Scrape<'a> {
    /// The store's statistics, read now.
    pub stats: &'a Stats,
    /// Clients connected now.
    pub connected: usize,
    /// Clients waiting in EVENT.NEXT BLOCK now.
    pub blocked: usize,
    /// Bytes of large replies built and not yet sent, and replies refused for want of room.
    pub reply_pending: usize,
    pub replies_refused: u64,
    /// Connections refused since start (max clients).
    pub rejected: u64,
    /// The recorder's `RECORD.STATUS` counters, if the server runs beside one.
    pub recorder: Option<Vec<(&'static str, i64)>>,
    /// The consumer groups, read now.
    pub groups: &'a [hotstore::GroupInfo],
    /// Age of the oldest READY and the oldest claimed event of the default queue.
    pub oldest_ready: Option<std::time::Duration>,
    pub oldest_claimed: Option<std::time::Duration>,
}

impl Metrics {
    /// Sets up the metrics; `commands` are the command names in the order of the indexes
    /// [`Metrics::called`] is given (the command table's).
    pub fn new<'a>(commands: impl IntoIterator<Item = &'a str>) -> Self {
        let names: Vec<String> = commands.into_iter().map(str::to_string).collect();
        let syncs = Counter::default();
        let synced_requests = Counter::default();
        Metrics {
            commands: names.iter().map(|_| OnceLock::new()).collect(),
            names,
            errors: Default::default(),
            bytes_in: Counter::default(),
            bytes_out: Counter::default(),
            connections_total: Counter::default(),
            off_worker: Counter::default(),
            group_commit: GroupCommitMetrics {
                syncs: syncs.clone(),
                requests: synced_requests.clone(),
                duration: Arc::new(Histogram::durations()),
                batch: Arc::new(Histogram::sizes()),
            },
            syncs,
            synced_requests,
            durability_wait: Histogram::durations(),
        }
    }

    /// What the group-commit thread records into.
    pub fn group_commit(&self) -> GroupCommitMetrics {
        self.group_commit.clone()
    }

    fn command_stats(&self, idx: usize) -> &CommandStats {
        self.commands[idx].get_or_init(|| CommandStats {
            calls: Counter::default(),
            latency: Histogram::durations(),
        })
    }

    /// Counts a call of command `idx` (its latency comes with [`Metrics::took`]).
    pub fn called(&self, idx: usize) {
        self.command_stats(idx).calls.inc();
    }

    /// Records that command `idx` took `took` until its reply could be sent (durability
    /// included).
    pub fn took(&self, idx: usize, took: Duration) {
        self.command_stats(idx).latency.observe_duration(took);
    }

    /// Records how long a connection's replies waited for their group commit.
    pub fn durability_waited(&self, took: Duration) {
        self.durability_wait.observe_duration(took);
    }

    /// Counts an error reply of `kind`.
    pub fn error(&self, kind: &str) {
        let i = ERROR_KINDS.iter().position(|k| *k == kind).unwrap_or(1);
        self.errors[i].inc();
    }

    /// Commands run since start.
    pub fn commands_total(&self) -> u64 {
        self.commands
            .iter()
            .filter_map(OnceLock::get)
            .map(|c| c.calls.get())
            .sum()
    }

    /// Error replies since start.
    pub fn errors_total(&self) -> u64 {
        self.errors.iter().map(Counter::get).sum()
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self, s: &Scrape) -> String {
        let mut p = Page::default();
        p.family(
            "hotstore_build_info",
            Kind::Gauge,
            "Always 1; the server's version is a label",
        );
        p.sample(&[("version", env!("CARGO_PKG_VERSION"))], 1u64);
        self.render_server(&mut p, s);
        render_store(&mut p, s.stats);
        render_tiers(&mut p, s.stats);
        render_events(&mut p, s.stats);
        render_ages(&mut p, s);
        render_groups(&mut p, s.groups);
        if let Some(r) = &s.recorder {
            render_recorder(&mut p, r);
        }
        process::render(&mut p);
        p.finish()
    }

    fn render_server(&self, p: &mut Page, s: &Scrape) {
        let used: Vec<(&str, &CommandStats)> = self
            .names
            .iter()
            .zip(self.commands.iter())
            .filter_map(|(n, c)| Some((n.as_str(), c.get()?)))
            .collect();
        p.family(
            "hotstore_commands_total",
            Kind::Counter,
            "Commands run, by command (a command appears once used)",
        );
        for (name, c) in &used {
            p.sample(&[("command", name)], c.calls.get());
        }
        p.family(
            "hotstore_command_duration_seconds",
            Kind::Histogram,
            "Time from the start of a command until its reply may be sent: a write's \
             group-commit wait included, network time excluded",
        );
        for (name, c) in &used {
            p.histogram(&[("command", name)], &c.latency);
        }
        p.family(
            "hotstore_errors_total",
            Kind::Counter,
            "Error replies, by kind",
        );
        for (kind, c) in ERROR_KINDS.iter().zip(&self.errors) {
            p.sample(&[("kind", kind)], c.get());
        }
        p.single(
            "hotstore_requests_off_worker_total",
            Kind::Counter,
            "Write requests run on a thread of their own because the store was short of room \
             (a write may wait for relocation; the worker's other clients go on meanwhile)",
            self.off_worker.get(),
        );
        p.single(
            "hotstore_net_input_bytes_total",
            Kind::Counter,
            "Bytes read from clients",
            self.bytes_in.get(),
        );
        p.single(
            "hotstore_net_output_bytes_total",
            Kind::Counter,
            "Bytes sent to clients",
            self.bytes_out.get(),
        );
        p.single(
            "hotstore_connected_clients",
            Kind::Gauge,
            "Clients connected now",
            s.connected,
        );
        p.single(
            "hotstore_reply_bytes_pending",
            Kind::Gauge,
            "Bytes of large replies (1 MiB and more) built and not yet sent",
            s.reply_pending,
        );
        p.single(
            "hotstore_replies_refused_total",
            Kind::Counter,
            "Large replies refused (-BUSY) because --max-reply-memory was taken",
            s.replies_refused,
        );
        p.single(
            "hotstore_blocked_clients",
            Kind::Gauge,
            "Clients waiting in EVENT.NEXT BLOCK now",
            s.blocked,
        );
        p.single(
            "hotstore_connections_total",
            Kind::Counter,
            "Connections accepted",
            self.connections_total.get(),
        );
        p.single(
            "hotstore_rejected_connections_total",
            Kind::Counter,
            "Connections refused because max-clients were connected",
            s.rejected,
        );
        p.family(
            "hotstore_group_commit_duration_seconds",
            Kind::Histogram,
            "Time of each group commit's sync (one sync covers every write waiting)",
        );
        p.histogram(&[], &self.group_commit.duration);
        p.family(
            "hotstore_group_commit_batch_size",
            Kind::Histogram,
            "Requests (a connection's batch of replies each) covered by one group commit",
        );
        p.histogram(&[], &self.group_commit.batch);
        p.family(
            "hotstore_durability_wait_seconds",
            Kind::Histogram,
            "Time a connection's replies to Persisted writes waited for their group commit \
             (queueing and sync)",
        );
        p.histogram(&[], &self.durability_wait);
    }
}

fn render_store(p: &mut Page, st: &Stats) {
    p.single(
        "hotstore_store_healthy",
        Kind::Gauge,
        "1 while the store accepts writes; 0 once an I/O error made it read-only (writes get \
         -IOERR; see the server's log)",
        st.poisoned.is_none(),
    );
    for (name, help, v) in [
        ("hotstore_store_entries", "Live keys", st.entries),
        (
            "hotstore_store_live_bytes",
            "Bytes of live records (headers and keys included), all tiers",
            st.live_bytes,
        ),
        (
            "hotstore_store_dead_bytes",
            "Bytes of dead records not yet reclaimed, all tiers",
            st.dead_bytes,
        ),
        (
            "hotstore_store_file_bytes",
            "Bytes of segment files held, all tiers",
            st.file_bytes,
        ),
    ] {
        p.single(name, Kind::Gauge, help, v);
    }
    p.single(
        "hotstore_store_written_bytes_total",
        Kind::Counter,
        "Bytes of records written by clients (puts, removals, event records)",
        st.written_bytes,
    );
    let w = &st.waits;
    let waits = [("segment", w.segment), ("full", w.full), ("sync", w.sync)];
    p.family(
        "hotstore_store_waits_total",
        Kind::Counter,
        "Times writers waited in the engine, by kind (segment: no prepared file; full: store \
         full; sync: an embedded Persisted write's sync)",
    );
    for (kind, wait) in waits {
        p.sample(&[("kind", kind)], wait.count);
    }
    p.family(
        "hotstore_store_wait_seconds_total",
        Kind::Counter,
        "Time writers waited in the engine, by kind",
    );
    for (kind, wait) in waits {
        p.sample(&[("kind", kind)], wait.total_ns as f64 / 1e9);
    }
    let r = &st.relocation;
    p.family(
        "hotstore_store_relocated_bytes_total",
        Kind::Counter,
        "Bytes of live records moved, by kind (cleaning: within a tier, to free dead space; \
         offload: to the tier below)",
    );
    p.sample(&[("kind", "cleaning")], r.bytes);
    p.sample(&[("kind", "offload")], r.offloaded_bytes);
    p.single(
        "hotstore_store_forwarded_records_total",
        Kind::Counter,
        "Removals and event marks copied forward with a segment moved alone (its group was \
         too large to move; done only to keep the guaranteed live bytes)",
        r.forwarded_records,
    );
    p.single(
        "hotstore_store_relocation_errors_total",
        Kind::Counter,
        "Background moves that failed or could not start (records stay where they were)",
        r.errors,
    );
    p.single(
        "hotstore_store_write_amplification",
        Kind::Gauge,
        "Bytes written to the tiers per byte written by clients since the store opened",
        st.write_amplification(),
    );
}

/// The room of the file system holding `path`: (total, available to us) bytes.
fn fs_room(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // Safety: statvfs is plain integers, for which all zeroes is a valid value.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // Safety: statvfs reads the NUL-terminated path and writes into `s`, both owned here.
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
        return None;
    }
    let unit = s.f_frsize as u64;
    Some((s.f_blocks as u64 * unit, s.f_bavail as u64 * unit))
}

/// A tier's label, its figures and, for a tier bounded by its file system (no --capacity),
/// that file system's size and free space, read now.
type TierRow<'a> = (String, &'a hotstore::TierStats, Option<(u64, u64)>);

fn render_tiers(p: &mut Page, st: &Stats) {
    let tiers: Vec<TierRow> = st
        .tiers
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let room = if t.capacity_bytes == 0 {
                fs_room(&t.path)
            } else {
                None
            };
            (i.to_string(), t, room)
        })
        .collect();
    p.family(
        "hotstore_tier_info",
        Kind::Gauge,
        "Always 1; a tier's directory, persistence domain, whether Persisted writes survive \
         a power cut, and whether --capacity bounds it (else its file system does)",
    );
    for (i, t, _) in &tiers {
        p.sample(
            &[
                ("tier", i),
                ("path", &t.path.display().to_string()),
                ("domain", t.domain.as_str()),
                ("survives_power_cut", bool_str(t.survives_power_cut)),
                ("bounded", bool_str(t.capacity_bytes > 0)),
            ],
            1u64,
        );
    }
    p.family(
        "hotstore_tier_capacity_bytes",
        Kind::Gauge,
        "The tier's --capacity or, without one, the size of its file system",
    );
    for (i, t, room) in &tiers {
        match (t.capacity_bytes, room) {
            (0, Some((total, _))) => p.sample(&[("tier", i)], *total),
            (0, None) => {} // unknown: left out rather than 0
            (c, _) => p.sample(&[("tier", i)], c),
        }
    }
    p.family(
        "hotstore_tier_free_bytes",
        Kind::Gauge,
        "Bytes that can still take records: capacity less live and dead records or, without \
         a capacity, the file system's available bytes plus segment-file bytes holding no record",
    );
    for (i, t, room) in &tiers {
        let used = t.live_bytes + t.dead_bytes;
        match (t.capacity_bytes, room) {
            (0, Some((_, avail))) => {
                p.sample(&[("tier", i)], avail + t.file_bytes.saturating_sub(used))
            }
            (0, None) => {}
            (c, _) => p.sample(&[("tier", i)], c.saturating_sub(used)),
        }
    }
    for (name, help, get) in [
        (
            "hotstore_tier_live_bytes",
            "Bytes of live records in the tier",
            (|t| t.live_bytes) as fn(&hotstore::TierStats) -> u64,
        ),
        (
            "hotstore_tier_dead_bytes",
            "Bytes of dead records in the tier not yet reclaimed",
            |t| t.dead_bytes,
        ),
        (
            "hotstore_tier_file_bytes",
            "Bytes of segment files the tier holds (in use, free and ready)",
            |t| t.file_bytes,
        ),
    ] {
        p.family(name, Kind::Gauge, help);
        for (i, t, _) in &tiers {
            p.sample(&[("tier", i)], get(t));
        }
    }
    for (name, help, get) in [
        (
            "hotstore_tier_files_created_total",
            "Segment files the tier created (ahead of writers, by a writer that found none \
             ready, or preallocated)",
            (|t| t.created.files) as fn(&hotstore::TierStats) -> u64,
        ),
        (
            "hotstore_tier_created_bytes_total",
            "Bytes of the segment files the tier created",
            |t| t.created.bytes,
        ),
    ] {
        p.family(name, Kind::Counter, help);
        for (i, t, _) in &tiers {
            p.sample(&[("tier", i)], get(t));
        }
    }
    p.family(
        "hotstore_tier_file_create_seconds_total",
        Kind::Counter,
        "Time spent creating the tier's segment files (allocate, map, pre-fault), summed over \
         the threads that did it: created bytes over it is the file system's rate for new space",
    );
    for (i, t, _) in &tiers {
        p.sample(&[("tier", i)], t.created.total_ns as f64 / 1e9);
    }
}

fn bool_str(b: bool) -> &'static str {
    if b {
        "true"
    } else {
        "false"
    }
}

/// How long the oldest READY and the oldest claimed event of the default queue have waited
/// (left out when there is none; a store with groups has them per group).
fn render_ages(p: &mut Page, s: &Scrape) {
    if let Some(d) = s.oldest_ready {
        p.single(
            "hotstore_events_oldest_ready_seconds",
            Kind::Gauge,
            "How long the oldest READY event has waited for a consumer (an upper bound, \
             within 1024 events)",
            d.as_secs_f64(),
        );
    }
    if let Some(d) = s.oldest_claimed {
        p.single(
            "hotstore_events_oldest_claimed_seconds",
            Kind::Gauge,
            "How long the oldest claim held now has been held",
            d.as_secs_f64(),
        );
    }
}

/// Per consumer group: lag, claims, poisoned events, deliveries and acknowledgements (their
/// rate is the group's ack rate), and the ages of its oldest waiting and claimed events.
fn render_groups(p: &mut Page, groups: &[hotstore::GroupInfo]) {
    if groups.is_empty() {
        return;
    }
    type Get = fn(&hotstore::GroupInfo) -> f64;
    let families: [(&str, Kind, &str, Get); 6] = [
        (
            "hotstore_group_lag",
            Kind::Gauge,
            "Events waiting to be offered to the group",
            |g| g.lag as f64,
        ),
        (
            "hotstore_group_pending",
            Kind::Gauge,
            "Claims the group's consumers hold now",
            |g| g.pending as f64,
        ),
        (
            "hotstore_group_poisoned",
            Kind::Gauge,
            "Events the group parked after --max-deliveries",
            |g| g.poisoned as f64,
        ),
        (
            "hotstore_group_delivered_total",
            Kind::Counter,
            "Claims handed to the group's consumers",
            |g| g.delivered_total as f64,
        ),
        (
            "hotstore_group_acked_total",
            Kind::Counter,
            "Acknowledgements the group made (its rate is the group's ack rate)",
            |g| g.acked_total as f64,
        ),
        (
            "hotstore_group_leases_expired_total",
            Kind::Counter,
            "The group's claims whose lease ended unacknowledged (offered again)",
            |g| g.leases_expired_total as f64,
        ),
    ];
    for (name, kind, help, get) in families {
        p.family(name, kind, help);
        for g in groups {
            p.sample(&[("group", &g.name)], get(g));
        }
    }
    type Age = fn(&hotstore::GroupInfo) -> Option<std::time::Duration>;
    let ages: [(&str, &str, Age); 2] = [
        (
            "hotstore_group_oldest_waiting_seconds",
            "How long the oldest event waiting for the group has been READY",
            |g| g.oldest_waiting,
        ),
        (
            "hotstore_group_oldest_pending_seconds",
            "How long the group's oldest claim has been held",
            |g| g.oldest_pending,
        ),
    ];
    for (name, help, get) in ages {
        if groups.iter().any(|g| get(g).is_some()) {
            p.family(name, Kind::Gauge, help);
            for g in groups {
                if let Some(d) = get(g) {
                    p.sample(&[("group", &g.name)], d.as_secs_f64());
                }
            }
        }
    }
}

/// Event families.
fn render_events(p: &mut Page, st: &Stats) {
    let e = &st.events;
    p.family(
        "hotstore_events",
        Kind::Gauge,
        "Events by state now (open: fragments arriving; ready: waiting for a consumer; \
         claimed: leased; kept: acknowledged KEEP; poisoned: parked after --max-deliveries)",
    );
    for (state, n) in [
        ("open", e.open),
        ("ready", e.ready),
        ("claimed", e.claimed),
        ("kept", e.kept),
        ("poisoned", e.poisoned),
    ] {
        p.sample(&[("state", state)], n);
    }
    p.single(
        "hotstore_events_incomplete",
        Kind::Gauge,
        "READY or CLAIMED events flagged incomplete (timed out or sealed with fragments missing)",
        e.incomplete,
    );
    p.family(
        "hotstore_events_acked_total",
        Kind::Counter,
        "Events acknowledged, by action",
    );
    p.sample(&[("action", "remove")], e.removed_total);
    p.sample(&[("action", "keep")], e.kept_total);
    for (name, help, v) in [
        (
            "hotstore_late_fragments_total",
            "Fragments refused (-LATE) because their event was already acknowledged",
            e.late_fragments_total,
        ),
        (
            "hotstore_acked_forgotten_total",
            "Intervals of acknowledged event ids forgotten past the limit (the oldest): their late fragments start new events",
            e.acked_forgotten_total,
        ),
        (
            "hotstore_leases_expired_total",
            "Claims that went back to READY because their lease expired",
            e.leases_expired_total,
        ),
        (
            "hotstore_claims_released_total",
            "Claims given back (EVENT.RELEASE, or their connection closed) before their lease ended",
            e.released_total,
        ),
        (
            "hotstore_events_timed_out_total",
            "Events that became READY by the incomplete timeout",
            e.timed_out_total,
        ),
    ] {
        p.single(name, Kind::Counter, help, v);
    }
}

/// The recorder's figures (a server run by `hotstore record --serve-port`).
fn render_recorder(p: &mut Page, status: &[(&'static str, i64)]) {
    for (key, v) in status {
        let v = u64::try_from(*v).unwrap_or(0);
        let (name, kind, help) = match *key {
            "frames_in" => (
                "hotstore_recorder_frames_total",
                Kind::Counter,
                "Frames the recorder received",
            ),
            "bytes_in" => (
                "hotstore_recorder_input_bytes_total",
                Kind::Counter,
                "Bytes the recorder received",
            ),
            "bytes_stored" => (
                "hotstore_recorder_stored_bytes_total",
                Kind::Counter,
                "Bytes the recorder wrote to the store",
            ),
            "frames_dropped" => (
                "hotstore_recorder_dropped_frames_total",
                Kind::Counter,
                "Frames dropped because the backlog reached its bound",
            ),
            "backlog_bytes" => (
                "hotstore_recorder_backlog_bytes",
                Kind::Gauge,
                "Bytes received and not yet written (held in DRAM)",
            ),
            _ => continue,
        };
        p.single(name, kind, help, v);
    }
}

/// Serves `GET /metrics` (and `/`) until `stop` turns true: HTTP/1.0-style, one request per
/// connection, which is what Prometheus and curl need. `page` renders the body of each answer
/// (the server's [`Metrics::render`] with its figures read then).
pub async fn serve_http<P>(listener: TcpListener, mut stop: watch::Receiver<bool>, page: P)
where
    P: Fn() -> String + Clone + Send + 'static,
{
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.wait_for(|s| *s) => return,
        };
        let Ok((mut sock, _)) = accepted else {
            // Out of file descriptors, usually: wait instead of spinning.
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let page = page.clone();
        tokio::spawn(async move {
            let mut req = Vec::with_capacity(1024);
            let mut buf = [0u8; 1024];
            let read = async {
                while !req.windows(4).any(|w| w == b"\r\n\r\n") && req.len() < 8192 {
                    match sock.read(&mut buf).await {
                        Ok(0) | Err(_) => return false,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                }
                true
            };
            if !tokio::time::timeout(Duration::from_secs(5), read)
                .await
                .unwrap_or(false)
            {
                return;
            }
            let line = String::from_utf8_lossy(&req[..req.len().min(256)]).into_owned();
            let path = line.split_whitespace().nth(1).unwrap_or("");
            let (status, body) = if line.starts_with("GET ") && (path == "/metrics" || path == "/")
            {
                ("200 OK", page())
            } else {
                ("404 Not Found", "not found: try GET /metrics\n".to_string())
            };
            let head = format!(
                "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n\
                 Content-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = sock.write_all(head.as_bytes()).await;
            let _ = sock.write_all(body.as_bytes()).await;
            let _ = sock.shutdown().await;
        });
    }
}
