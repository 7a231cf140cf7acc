//! Metrics: counters and latency histograms kept on the hot path (one atomic add and one
//! histogram observation per command, handles resolved at start), rendered in the Prometheus
//! text format by `prometheus-client` and served over plain HTTP on `--metrics-port`.
//!
//! Depends on no other module of the server: the command names, the figures read at a scrape
//! and the page to serve are handed in by the caller.

use hotstore::Stats;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::watch;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CommandLabel {
    command: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WaitLabel {
    kind: String,
}

/// Error kinds counted (see `error::error_kind`).
const ERROR_KINDS: [&str; 9] = [
    "protocol",
    "request",
    "auth",
    "full",
    "late",
    "claimlost",
    "noevent",
    "acked",
    "io",
];

/// The server's metrics.
pub struct Metrics {
    registry: Registry,
    calls: Vec<Counter>,
    latency: Vec<Histogram>,
    errors: Vec<Counter>,
    /// Bytes read from clients.
    pub bytes_in: Counter,
    /// Bytes written to clients.
    pub bytes_out: Counter,
    /// Connections accepted.
    pub connections_total: Counter,
    /// Group commits done.
    pub syncs: Counter,
    /// Requests covered by group commits.
    pub synced_requests: Counter,
    connected: Gauge,
    rejected: Gauge,
    store_gauges: Vec<(&'static str, Gauge)>,
    events: Family<StateLabel, Gauge>,
    /// The engine's wait counters (`Stats::waits`), mirrored at each scrape.
    waits: Family<WaitLabel, Counter>,
    wait_ns: Family<WaitLabel, Counter>,
    /// Bytes relocation moved (`Stats::relocation`), by kind: `cleaning` within a tier,
    /// `offload` to the tier below.
    relocated: Family<WaitLabel, Counter>,
    /// Bytes written to the tiers per byte users wrote since open.
    write_amplification: Gauge<f64, std::sync::atomic::AtomicU64>,
}

impl Metrics {
    /// Registers every metric; `commands` are the command names in the order of the indexes
    /// [`Metrics::command`] is given (the command table's).
    pub fn new<'a>(commands: impl IntoIterator<Item = &'a str>) -> Self {
        let commands: Vec<&str> = commands.into_iter().collect();
        let mut registry = Registry::with_prefix("hotstore");
        let calls_family = Family::<CommandLabel, Counter>::default();
        let latency_family = Family::<CommandLabel, Histogram>::new_with_constructor(|| {
            // 1 µs to ~8 s.
            Histogram::new(exponential_buckets(1e-6, 2.0, 24))
        });
        let errors_family = Family::<KindLabel, Counter>::default();
        let label = |n: &str| CommandLabel {
            command: n.to_string(),
        };
        let calls = commands
            .iter()
            .map(|name| calls_family.get_or_create(&label(name)).clone())
            .collect();
        let latency = commands
            .iter()
            .map(|name| latency_family.get_or_create(&label(name)).clone())
            .collect();
        let errors = ERROR_KINDS
            .iter()
            .map(|k| {
                errors_family
                    .get_or_create(&KindLabel {
                        kind: k.to_string(),
                    })
                    .clone()
            })
            .collect();
        registry.register("commands", "Commands run, by command", calls_family);
        registry.register(
            "command_duration_seconds",
            "Time to run a command in the server (excluding network and group-commit wait)",
            latency_family,
        );
        registry.register("errors", "Error replies, by kind", errors_family);
        let m = Metrics {
            calls,
            latency,
            errors,
            bytes_in: Counter::default(),
            bytes_out: Counter::default(),
            connections_total: Counter::default(),
            syncs: Counter::default(),
            synced_requests: Counter::default(),
            connected: Gauge::default(),
            rejected: Gauge::default(),
            store_gauges: [
                "store_entries",
                "store_live_bytes",
                "store_dead_bytes",
                "store_capacity_bytes",
                "store_file_bytes",
            ]
            .into_iter()
            .map(|n| (n, Gauge::default()))
            .collect(),
            events: Family::default(),
            waits: Family::default(),
            wait_ns: Family::default(),
            relocated: Family::default(),
            write_amplification: Gauge::default(),
            registry,
        };
        let mut m = m;
        let r = &mut m.registry;
        r.register(
            "net_input_bytes",
            "Bytes read from clients",
            m.bytes_in.clone(),
        );
        r.register(
            "net_output_bytes",
            "Bytes sent to clients",
            m.bytes_out.clone(),
        );
        r.register(
            "connections",
            "Connections accepted",
            m.connections_total.clone(),
        );
        r.register(
            "group_syncs",
            "Group commits (one sync each)",
            m.syncs.clone(),
        );
        r.register(
            "group_synced_requests",
            "Requests made durable by group commits",
            m.synced_requests.clone(),
        );
        r.register(
            "connected_clients",
            "Clients connected now",
            m.connected.clone(),
        );
        r.register(
            "rejected_connections",
            "Connections refused (max clients)",
            m.rejected.clone(),
        );
        for (name, g) in &m.store_gauges {
            r.register(*name, "Store statistics (see STORE.STATS)", g.clone());
        }
        r.register("events", "Events by state", m.events.clone());
        r.register(
            "store_waits",
            "Times writers waited, by kind (segment: no prepared file; full: store full; sync: group commit)",
            m.waits.clone(),
        );
        r.register(
            "store_wait_nanoseconds",
            "Time writers waited, by kind",
            m.wait_ns.clone(),
        );
        r.register(
            "store_relocated_bytes",
            "Bytes of live records moved, by kind (cleaning: within a tier, to free dead space; offload: to the tier below)",
            m.relocated.clone(),
        );
        r.register(
            "store_write_amplification",
            "Bytes written to the tiers per byte written by users since the store opened",
            m.write_amplification.clone(),
        );
        m
    }

    /// Counts a command that took `took`.
    pub fn command(&self, idx: usize, took: Duration) {
        self.calls[idx].inc();
        self.latency[idx].observe(took.as_secs_f64());
    }

    /// Counts an error reply of `kind`.
    pub fn error(&self, kind: &str) {
        let i = ERROR_KINDS.iter().position(|k| *k == kind).unwrap_or(1);
        self.errors[i].inc();
    }

    /// Commands run since start.
    pub fn commands_total(&self) -> u64 {
        self.calls.iter().map(Counter::get).sum()
    }

    /// Error replies since start.
    pub fn errors_total(&self) -> u64 {
        self.errors.iter().map(Counter::get).sum()
    }

    /// The Prometheus text exposition of every metric, with the store gauges set from `st` (the
    /// store's statistics read now) and the client gauges from `connected` clients and
    /// `rejected` connections.
    pub fn render(&self, st: &Stats, connected: usize, rejected: u64) -> String {
        let values = [
            st.entries,
            st.live_bytes,
            st.dead_bytes,
            st.capacity_bytes,
            st.file_bytes,
        ];
        for ((_, g), v) in self.store_gauges.iter().zip(values) {
            g.set(v as i64);
        }
        let e = &st.events;
        for (state, n) in [
            ("open", e.open),
            ("ready", e.ready),
            ("claimed", e.claimed),
            ("kept", e.kept),
        ] {
            self.events
                .get_or_create(&StateLabel {
                    state: state.into(),
                })
                .set(n as i64);
        }
        let w = &st.waits;
        for (kind, wait) in [("segment", w.segment), ("full", w.full), ("sync", w.sync)] {
            let label = WaitLabel { kind: kind.into() };
            // Counters only go up: add what the engine counted since the last scrape.
            let count = self.waits.get_or_create(&label);
            count.inc_by(wait.count.saturating_sub(count.get()));
            let ns = self.wait_ns.get_or_create(&label);
            ns.inc_by(wait.total_ns.saturating_sub(ns.get()));
        }
        let r = &st.relocation;
        for (kind, bytes) in [("cleaning", r.bytes), ("offload", r.offloaded_bytes)] {
            let c = self
                .relocated
                .get_or_create(&WaitLabel { kind: kind.into() });
            c.inc_by(bytes.saturating_sub(c.get()));
        }
        self.write_amplification.set(st.write_amplification());
        self.connected.set(connected as i64);
        self.rejected.set(rejected as i64);
        let mut text = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
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
