//! The metrics page of a running server after some traffic: what it holds, and that
//! `promtool check metrics` (Prometheus's own parser and linter) finds nothing wrong with it.
//! promtool is required: a missing one fails the test and says to run `scripts/test` (which
//! installs the Debian package `prometheus`, where it comes from).
#![allow(clippy::unwrap_used, reason = "test code: a panic is how a test fails")]

mod common;

use common::{config, Client};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};

/// The page at `GET /metrics`: (head, body).
fn scrape(addr: SocketAddr) -> (String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut page = String::new();
    s.read_to_string(&mut page).unwrap();
    let (head, body) = page.split_once("\r\n\r\n").expect("no end of HTTP head");
    (head.to_string(), body.to_string())
}

/// Every sample of the page, by name and labels as written (`name{labels}`).
fn samples(body: &str) -> BTreeMap<String, f64> {
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').unwrap();
            (k.to_string(), v.parse().unwrap())
        })
        .collect()
}

fn promtool_check(body: &str) {
    let child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => panic!(
            "cannot run promtool ({e}): run `scripts/test` (it installs the Debian package \
             prometheus, which has promtool)"
        ),
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(
        o.status.success(),
        "promtool check metrics: {}\n{}{}\npage:\n{body}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn metrics_page_after_traffic_passes_promtool() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = config(tmp.path());
    c.metrics_port = Some(0);
    let server = hotstore_server::spawn(c).unwrap();
    let maddr = server.metrics_addr().unwrap();

    // A fresh server: no command has a series yet.
    let (head, fresh) = scrape(maddr);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.contains("Content-Type: text/plain; version=0.0.4"),
        "{head}"
    );
    assert!(!fresh.contains("command=\""), "{fresh}");
    promtool_check(&fresh);

    // Traffic: plain keys, a fragment, a claim and its acknowledgement (every write Persisted,
    // the server's default, so each goes through the group commit).
    let mut cl = Client::connect(server.tcp_addr());
    assert_eq!(cl.call(&["SET", "k", "v"]), "+OK");
    assert_eq!(cl.call(&["GET", "k"]), "$1");
    assert_eq!(cl.line(), "v");
    assert_eq!(cl.call(&["FRAG.PUT", "1", "7", "0", "0", "payload"]), "+OK");
    assert_eq!(cl.call(&["EVENT.NEXT", "LEASE", "60000"]), "*4");
    let token = cl.bulk().unwrap();
    for _ in 0..3 {
        cl.line(); // [run, event] header and fields (read up to the fragments)
    }
    assert_eq!(cl.line(), ":0"); // complete
    assert_eq!(cl.line(), "*1");
    assert_eq!(cl.line(), "*3");
    cl.line();
    cl.line();
    assert_eq!(cl.bulk().unwrap(), b"payload");
    let token = String::from_utf8(token).unwrap();
    assert_eq!(cl.call(&["EVENT.ACK", &token, "REMOVE"]), "+OK");
    assert!(cl
        .call(&["NOSUCHCOMMAND"])
        .starts_with("-ERR unknown command"));

    let (_, body) = scrape(maddr);
    promtool_check(&body);
    let s = samples(&body);
    let get = |k: &str| *s.get(k).unwrap_or_else(|| panic!("no {k} in\n{body}"));
    for cmd in ["set", "get", "frag.put", "event.next", "event.ack"] {
        assert_eq!(
            get(&format!("hotstore_commands_total{{command=\"{cmd}\"}}")),
            1.0
        );
        assert_eq!(
            get(&format!(
                "hotstore_command_duration_seconds_count{{command=\"{cmd}\"}}"
            )),
            1.0
        );
    }
    // Only commands used have series: 5 commands, 1 counter + 24 buckets + 3 each.
    let series = |prefix: &str| s.keys().filter(|k| k.starts_with(prefix)).count();
    assert_eq!(series("hotstore_commands_total{"), 5, "{body}");
    assert_eq!(
        series("hotstore_command_duration_seconds"),
        5 * 27,
        "{body}"
    );
    assert!(!body.contains("command=\"mget\""));

    // One request at a time: each group commit began after the write it covers ran and
    // ended before that write's reply, so the commands' latencies contain every commit's
    // sync, whatever the speed of the machine (sums of nested intervals).
    let commits = get("hotstore_group_commit_duration_seconds_count");
    assert!(commits >= 3.0, "{body}"); // SET, FRAG.PUT, EVENT.ACK at least
    let latencies: f64 = s
        .iter()
        .filter(|(k, _)| k.starts_with("hotstore_command_duration_seconds_sum{"))
        .map(|(_, v)| v)
        .sum();
    // Each write's latency also contains its connection's whole wait for the commit.
    let waits = get("hotstore_durability_wait_seconds_sum");
    let syncs = get("hotstore_group_commit_duration_seconds_sum");
    assert!(
        latencies + 1e-9 >= waits && waits + 1e-9 >= syncs,
        "commands {latencies} s, durability waits {waits} s, syncs {syncs} s"
    );
    assert_eq!(get("hotstore_durability_wait_seconds_count"), commits);
    assert_eq!(get("hotstore_group_commit_batch_size_count"), commits);

    assert_eq!(get("hotstore_errors_total{kind=\"request\"}"), 1.0);
    assert_eq!(get("hotstore_events_acked_total{action=\"remove\"}"), 1.0);
    assert_eq!(get("hotstore_events{state=\"ready\"}"), 0.0);
    assert_eq!(get("hotstore_store_healthy"), 1.0);
    assert_eq!(get("hotstore_connected_clients"), 1.0);
    assert_eq!(
        get(&format!(
            "hotstore_build_info{{version=\"{}\"}}",
            env!("CARGO_PKG_VERSION")
        )),
        1.0
    );
    // The store has no --capacity: its tier reports its file system instead of 0.
    assert!(
        get("hotstore_tier_capacity_bytes{tier=\"0\"}") > 0.0,
        "{body}"
    );
    assert!(get("hotstore_tier_free_bytes{tier=\"0\"}") > 0.0, "{body}");
    // The writes needed a segment file: created files are counted with their bytes and time.
    let created = get("hotstore_tier_files_created_total{tier=\"0\"}");
    assert!(created >= 1.0, "{body}");
    assert!(
        get("hotstore_tier_created_bytes_total{tier=\"0\"}") >= created * 4096.0,
        "{body}"
    );
    assert!(
        get("hotstore_tier_file_create_seconds_total{tier=\"0\"}") > 0.0,
        "{body}"
    );
    assert!(get("process_resident_memory_bytes") > 0.0, "{body}");
    assert!(get("process_open_fds") > 0.0, "{body}");
    server.shutdown().unwrap();
}

/// The ages of the oldest READY and claimed events, and per consumer group its lag, claims,
/// poisoned events, deliveries, acknowledgements and ages: present, consistent, and valid
/// for promtool.
#[test]
fn event_ages_and_group_metrics_pass_promtool() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = config(tmp.path());
    c.metrics_port = Some(0);
    let server = hotstore_server::spawn(c).unwrap();
    let maddr = server.metrics_addr().unwrap();
    let mut cl = Client::connect(server.tcp_addr());
    for e in ["1", "2", "3"] {
        assert_eq!(cl.call(&["FRAG.PUT", "1", e, "0", "0", "v"]), "+OK");
    }
    let (_, body) = scrape(maddr);
    promtool_check(&body);
    let s = samples(&body);
    assert!(s["hotstore_events_oldest_ready_seconds"] >= 0.0, "{body}");
    assert!(!s.contains_key("hotstore_events_oldest_claimed_seconds"));
    assert!(!body.contains("{group="), "no groups, no group series");

    assert_eq!(cl.call(&["EVENT.GROUP", "CREATE", "filter"]), "+OK");
    assert_eq!(
        cl.call(&["EVENT.GROUP", "CREATE", "sampler", "OPTIONAL"]),
        "+OK"
    );
    assert_eq!(
        cl.call(&["EVENT.NEXT", "GROUP", "filter", "COUNT", "2"]),
        "*2"
    );
    let (_, body) = scrape(maddr);
    promtool_check(&body);
    let s = samples(&body);
    let get = |k: &str| *s.get(k).unwrap_or_else(|| panic!("no {k} in\n{body}"));
    assert_eq!(get("hotstore_group_pending{group=\"filter\"}"), 2.0);
    assert_eq!(get("hotstore_group_lag{group=\"filter\"}"), 1.0);
    assert_eq!(get("hotstore_group_lag{group=\"sampler\"}"), 3.0);
    assert_eq!(get("hotstore_group_delivered_total{group=\"filter\"}"), 2.0);
    assert_eq!(get("hotstore_group_acked_total{group=\"filter\"}"), 0.0);
    assert!(get("hotstore_group_oldest_pending_seconds{group=\"filter\"}") >= 0.0);
    assert!(get("hotstore_group_oldest_waiting_seconds{group=\"sampler\"}") >= 0.0);
    assert!(!s.contains_key("hotstore_group_oldest_pending_seconds{group=\"sampler\"}"));
    drop(cl);
    server.shutdown().unwrap();
}

/// Found in a full-device campaign: a SET on a full store waited on its worker thread while
/// maintenance relocated records for room, and every other connection of that worker waited
/// with it (a PING took 14.6 s). While the store is short of room, requests run on a thread
/// of their own; the page counts them.
#[test]
fn requests_on_a_store_short_of_room_run_off_the_worker() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = config(tmp.path());
    c.metrics_port = Some(0);
    c.capacity = 64 << 20;
    c.durability = hotstore::Durability::Memory;
    let server = hotstore_server::spawn(c).unwrap();
    let maddr = server.metrics_addr().unwrap();
    let off_worker = || samples(&scrape(maddr).1)["hotstore_requests_off_worker_total"];
    let mut cl = Client::connect(server.tcp_addr());
    let v = vec![7u8; 1 << 20];
    let mut fulls = 0;
    for i in 0..256 {
        cl.send(&[b"SET", format!("k{i}").as_bytes(), &v]);
        let r = cl.line();
        if r != "+OK" {
            assert!(r.starts_with("-FULL"), "{r}");
            fulls += 1;
            if fulls == 4 {
                break;
            }
        }
    }
    assert_eq!(fulls, 4, "a 64 MiB store took 256 x 1 MiB");
    // Each refused SET found the store short of room a moment before the next request.
    assert!(off_worker() >= 1.0);
    assert_eq!(cl.call(&["PING"]), "+PONG");
    server.shutdown().unwrap();
}
