//! Proves a cluster of three `hotstore serve --cluster` processes works with unmodified clients:
//! `redis-cli -c` follows MOVED, `redis-cli --cluster check|info` and `hotstore cluster check`
//! accept it (and `hotstore cluster check` refuses it with a node down or on another map), redis-py's
//! RedisCluster and hotstore.ClusterClient route keys and events and consume every event exactly
//! once (tests/python/test_cluster.py), and a node killed with SIGKILL under persisted durability
//! stops only its own slots, comes back on its store with every write it acknowledged, and rejoins.
//! Each test starts its own nodes on loopback ports, stops them with SIGTERM (each must exit 0) and
//! kills them if it fails. Skipped, saying why, when python3 with redis-py and pytest, or redis-cli,
//! is missing (`scripts/test` installs them).
#![allow(clippy::unwrap_used, reason = "test code: a panic is how a test fails")]

mod common;

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_hotstore");

/// How long a node may take to print its listening line.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a node may take to exit after SIGTERM.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one client command (redis-cli, hotstore cluster check) may take.
const TOOL_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a Python suite may take.
const SUITE_TIMEOUT: Duration = Duration::from_secs(900);
/// Fragments that make an event complete on the nodes of the Python suites.
const EXPECTED_FRAGMENTS: &str = "3";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Why the tests cannot run here (a client tool is missing), or None.
fn missing_tool() -> Option<String> {
    let checks: [(&str, &[&str], &str); 2] = [
        (
            "python3",
            &[
                "-c",
                "import redis, pytest, sys; sys.exit(int(redis.__version__.split('.')[0]) < 5)",
            ],
            "python3 with redis-py 5 or later and pytest (pip install -U redis pytest)",
        ),
        (
            "redis-cli",
            &["--version"],
            "redis-cli (Debian package redis-tools)",
        ),
    ];
    for (prog, args, what) in checks {
        let ok = Command::new(prog)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !ok {
            return Some(format!(
                "{what} is missing: run `scripts/test` (it installs the clients) or install it"
            ));
        }
    }
    None
}

macro_rules! require_tools {
    () => {
        if let Some(why) = missing_tool() {
            eprintln!("skipping: {why}");
            return;
        }
    };
}

/// Collects a child's output lines.
type Log = Arc<Mutex<String>>;

fn drain_into(
    stream: impl Read + Send + 'static,
    log: Log,
    tag: String,
    listening: Option<mpsc::Sender<()>>,
) -> JoinHandle<()> {
    thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            if let Some(tx) = &listening {
                if line.trim().starts_with("hotstore: listening on ") {
                    let _ = tx.send(());
                }
            }
            let mut log = log.lock().unwrap_or_else(|e| e.into_inner());
            log.push_str(&tag);
            log.push_str(&line);
            log.push('\n');
        }
    })
}

fn text(log: &Log) -> String {
    log.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// `n` loopback ports free right now (bound then released: a node could lose one to another
/// process before it binds it, so a cluster that fails to start is retried on new ports).
fn free_ports(n: usize) -> Vec<u16> {
    let held: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    held.iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}

/// One node: `hotstore serve --cluster MAP` on its own store; killed (SIGKILL) if dropped
/// running.
struct Node {
    port: u16,
    map: PathBuf,
    store: PathBuf,
    extra: Vec<String>,
    child: Option<Child>,
    readers: Vec<JoinHandle<()>>,
    /// Output of every run of this node.
    log: Log,
}

impl Node {
    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Starts the node and waits for its listening line.
    fn start(&mut self) -> Result<(), String> {
        assert!(self.child.is_none(), "node {} is running", self.addr());
        let mut child = Command::new(BIN)
            .arg("serve")
            .arg("--cluster")
            .arg(&self.map)
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string()])
            .arg("--dir")
            .arg(&self.store)
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start hotstore serve: {e}"))?;
        let (tx, rx) = mpsc::channel();
        let tag = format!("[{}] ", self.port);
        self.readers = vec![
            drain_into(
                child.stdout.take().unwrap(),
                self.log.clone(),
                tag.clone(),
                Some(tx),
            ),
            drain_into(
                child.stderr.take().unwrap(),
                self.log.clone(),
                format!("{tag}[stderr] "),
                None,
            ),
        ];
        self.child = Some(child);
        match rx.recv_timeout(START_TIMEOUT) {
            Ok(()) => Ok(()),
            Err(_) => {
                self.kill();
                Err(format!(
                    "node {} printed no listening line within {START_TIMEOUT:?}; its output:\n{}",
                    self.addr(),
                    text(&self.log)
                ))
            }
        }
    }

    /// SIGKILL, and wait for it.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
    }

    /// SIGTERM; Ok if the node exited 0 within STOP_TIMEOUT.
    fn stop(&mut self) -> Result<(), String> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let status = common::terminate(&mut child, STOP_TIMEOUT);
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        match status {
            Some(s) if s.code() == Some(0) => Ok(()),
            Some(s) => Err(format!(
                "node {} exited with {s} after SIGTERM",
                self.addr()
            )),
            None => Err(format!(
                "node {} did not exit within {STOP_TIMEOUT:?} of SIGTERM (killed)",
                self.addr()
            )),
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Three nodes on loopback, each on its own store in one temporary directory.
struct Cluster {
    nodes: Vec<Node>,
    map: PathBuf,
    dir: tempfile::TempDir,
}

impl Cluster {
    /// Writes a map (`hotstore cluster create`) and starts a node per address; `extra` goes to
    /// every `hotstore serve`. Retried on new ports if a node cannot start (a port taken).
    fn start(extra: &[&str]) -> Cluster {
        let mut last = String::new();
        for _ in 0..3 {
            match Cluster::try_start(extra) {
                Ok(c) => return c,
                Err(e) => last = e,
            }
        }
        panic!("cannot start a cluster: {last}");
    }

    fn try_start(extra: &[&str]) -> Result<Cluster, String> {
        let base = Path::new("/dev/shm");
        let dir = if base.is_dir() {
            tempfile::Builder::new()
                .prefix("hotstore-cluster-")
                .tempdir_in(base)
        } else {
            tempfile::Builder::new()
                .prefix("hotstore-cluster-")
                .tempdir()
        }
        .expect("temporary directory");
        let ports = free_ports(3);
        let map = dir.path().join("cluster.toml");
        write_map(&map, &ports)?;
        let mut nodes: Vec<Node> = ports
            .iter()
            .enumerate()
            .map(|(i, &port)| Node {
                port,
                map: map.clone(),
                store: dir.path().join(format!("node{i}")),
                extra: extra.iter().map(|s| s.to_string()).collect(),
                child: None,
                readers: Vec::new(),
                log: Log::default(),
            })
            .collect();
        for n in &mut nodes {
            n.start()?;
        }
        Ok(Cluster { nodes, map, dir })
    }

    fn addrs(&self) -> Vec<String> {
        self.nodes.iter().map(Node::addr).collect()
    }

    fn logs(&self) -> String {
        self.nodes.iter().map(|n| text(&n.log)).collect()
    }

    /// Stops every node (SIGTERM); panics, with the nodes' output, if one did not exit 0.
    fn stop(mut self) {
        let errors: Vec<String> = self
            .nodes
            .iter_mut()
            .filter_map(|n| n.stop().err())
            .collect();
        assert!(
            errors.is_empty(),
            "{}\nthe nodes' output:\n{}",
            errors.join("\n"),
            self.logs()
        );
    }
}

/// `hotstore cluster create` for loopback nodes on `ports`.
fn write_map(path: &Path, ports: &[u16]) -> Result<(), String> {
    let mut cmd = Command::new(BIN);
    cmd.args(["cluster", "create", "--force", "-o"]).arg(path);
    for p in ports {
        cmd.arg("--addr").arg(format!("127.0.0.1:{p}"));
    }
    let (code, out) = run(&mut cmd, TOOL_TIMEOUT);
    if code == Some(0) {
        Ok(())
    } else {
        Err(format!("hotstore cluster create failed: {out}"))
    }
}

/// Runs `cmd` in the repository root, killing it after `timeout`; (exit code, output).
fn run(cmd: &mut Command, timeout: Duration) -> (Option<i32>, String) {
    let what = format!("{cmd:?}");
    let mut child = cmd
        .current_dir(repo_root())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
    let log: Log = Arc::default();
    let readers = [
        drain_into(
            child.stdout.take().unwrap(),
            log.clone(),
            String::new(),
            None,
        ),
        drain_into(
            child.stderr.take().unwrap(),
            log.clone(),
            String::new(),
            None,
        ),
    ];
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait().expect("wait for child") {
            Some(status) => break Some(status),
            None if Instant::now() < deadline => thread::sleep(Duration::from_millis(20)),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    for r in readers {
        let _ = r.join();
    }
    let mut out = text(&log);
    if status.is_none() {
        out.push_str(&format!("\n[{what} killed after {timeout:?}]\n"));
    }
    (status.and_then(|s| s.code()), out)
}

/// Runs a client tool and requires exit status `want`; returns its output.
fn expect_exit(cluster: &Cluster, want: i32, args: &[&str]) -> String {
    let (code, out) = run(Command::new(args[0]).args(&args[1..]), TOOL_TIMEOUT);
    assert_eq!(
        code,
        Some(want),
        "{args:?} exited with {code:?}, not {want}:\n{out}\nthe nodes' output:\n{}",
        cluster.logs()
    );
    out
}

fn redis_cli(port: u16, args: &[&str]) -> (Option<i32>, String) {
    run(
        Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &port.to_string()])
            .args(args),
        TOOL_TIMEOUT,
    )
}

fn dbsize(port: u16) -> u64 {
    let (code, out) = redis_cli(port, &["DBSIZE"]);
    assert_eq!(code, Some(0), "redis-cli DBSIZE: {out}");
    out.trim()
        .parse()
        .unwrap_or_else(|_| panic!("DBSIZE: {out}"))
}

#[test]
fn redis_cli_follows_moved_and_cluster_checks_see_the_state() {
    require_tools!();
    let mut c = Cluster::start(&["--durability", "memory"]);
    let addrs = c.addrs();
    let ports: Vec<u16> = c.nodes.iter().map(|n| n.port).collect();
    let tag = format!("k{}-{}", std::process::id(), rand::random::<u32>());
    // redis-cli -c through the first node: it follows MOVED to the others.
    for i in 0..24 {
        let key = format!("{tag}:{i}");
        let (code, out) = redis_cli(ports[0], &["-c", "SET", &key, &format!("v{i}")]);
        assert_eq!((code, out.trim()), (Some(0), "OK"), "SET {key}");
        let (code, out) = redis_cli(ports[0], &["-c", "GET", &key]);
        assert_eq!(
            (code, out.trim()),
            (Some(0), format!("v{i}").as_str()),
            "GET {key}"
        );
    }
    let sizes: Vec<u64> = ports.iter().map(|&p| dbsize(p)).collect();
    assert_eq!(sizes.iter().sum::<u64>(), 24, "keys per node: {sizes:?}");
    assert!(
        sizes.iter().all(|&n| n > 0),
        "every node gets keys: {sizes:?}"
    );
    // Without -c, a key of another node is a MOVED error naming its node.
    let other = (0..24)
        .map(|i| format!("{tag}:{i}"))
        .find(|k| {
            let (_, out) = redis_cli(ports[0], &["GET", k]);
            out.contains("MOVED")
        })
        .expect("a key of another node");
    let (_, out) = redis_cli(ports[0], &["GET", &other]);
    assert!(
        out.contains("MOVED") && (out.contains(&addrs[1]) || out.contains(&addrs[2])),
        "{out}"
    );

    // The cluster tools see a healthy cluster.
    let first = addrs[0].as_str();
    let out = expect_exit(&c, 0, &["redis-cli", "--cluster", "check", first]);
    assert!(out.contains("[OK] All 16384 slots covered"), "{out}");
    let out = expect_exit(&c, 0, &["redis-cli", "--cluster", "info", first]);
    assert!(out.contains("[OK] 24 keys in 3 masters"), "{out}");
    for a in &addrs {
        assert!(out.contains(a.as_str()), "{a} in --cluster info:\n{out}");
    }
    let map = c.map.to_str().unwrap().to_string();
    let out = expect_exit(&c, 0, &[BIN, "cluster", "check", first]);
    assert!(out.contains("[OK] All 16384 slots covered"), "{out}");
    expect_exit(&c, 0, &[BIN, "cluster", "check", "--map", &map]);

    // A node down: unhealthy, whichever node is asked; healthy again once it is back.
    c.nodes[2].kill();
    let out = expect_exit(&c, 1, &[BIN, "cluster", "check", first]);
    assert!(out.contains(&format!("[ERR] {}", addrs[2])), "{out}");
    let out = expect_exit(&c, 1, &[BIN, "cluster", "check", "--map", &map]);
    assert!(out.contains(&format!("[ERR] {}", addrs[2])), "{out}");
    c.nodes[2].start().unwrap();
    expect_exit(&c, 0, &[BIN, "cluster", "check", first]);
    expect_exit(&c, 0, &[BIN, "cluster", "check", "--map", &map]);

    // A node on another map (same addresses, new node ids), on a store of its own.
    c.nodes[2].stop().unwrap();
    let other_map = c.dir.path().join("other.toml");
    write_map(&other_map, &ports).unwrap();
    c.nodes[2].map = other_map;
    c.nodes[2].store = c.dir.path().join("node2-other");
    c.nodes[2].start().unwrap();
    let out = expect_exit(&c, 1, &[BIN, "cluster", "check", first]);
    assert!(out.contains("serve different maps"), "{out}");
    let out = expect_exit(&c, 1, &[BIN, "cluster", "check", "--map", &map]);
    assert!(out.contains("[ERR]"), "{out}");
    c.stop();
}

/// Runs `python3 -m pytest tests/python/test_cluster.py -k SELECT` against the cluster.
/// With `control`, the suite may ask (lines `kill I`, `restart I` on a TCP connection) for a
/// node to be killed with SIGKILL or restarted on its store; each is answered `ok` or
/// `err WHY` once done.
fn pytest(cluster: &mut Cluster, select: &str, control: bool) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let mut cmd = Command::new("python3");
    cmd.args(["-m", "pytest", "-p", "no:cacheprovider", "-v", "-rs"])
        .arg("tests/python/test_cluster.py")
        .args(["-k", select])
        .env("HOTSTORE_CLUSTER", cluster.addrs().join(","))
        .env("HOTSTORE_BIN", BIN)
        .current_dir(repo_root())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if control {
        cmd.env(
            "HOTSTORE_CONTROL",
            listener.local_addr().unwrap().to_string(),
        );
    }
    let mut child = cmd.spawn().expect("start python3 -m pytest");
    let log: Log = Arc::default();
    let readers = [
        drain_into(
            child.stdout.take().unwrap(),
            log.clone(),
            String::new(),
            None,
        ),
        drain_into(
            child.stderr.take().unwrap(),
            log.clone(),
            String::new(),
            None,
        ),
    ];
    let deadline = Instant::now() + SUITE_TIMEOUT;
    let mut conn: Option<(BufReader<TcpStream>, String)> = None;
    let mut driver_log = String::new();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for pytest") {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        if conn.is_none() {
            match listener.accept() {
                Ok((stream, _)) => {
                    stream.set_nonblocking(false).unwrap();
                    stream
                        .set_read_timeout(Some(Duration::from_millis(50)))
                        .unwrap();
                    conn = Some((BufReader::new(stream), String::new()));
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => panic!("control accept: {e}"),
            }
        }
        let Some((reader, line)) = conn.as_mut() else {
            thread::sleep(Duration::from_millis(20));
            continue;
        };
        match reader.read_line(line) {
            Ok(0) => conn = None, // the suite closed it
            Ok(_) if line.ends_with('\n') => {
                let request = std::mem::take(line);
                let answer = control_request(cluster, request.trim());
                driver_log.push_str(&format!("[driver] {} -> {answer}\n", request.trim()));
                let stream = reader.get_mut();
                if stream.write_all(format!("{answer}\n").as_bytes()).is_err() {
                    conn = None;
                }
            }
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => conn = None,
        }
    };
    for r in readers {
        let _ = r.join();
    }
    let out = text(&log) + &driver_log;
    match status {
        Some(s) if s.success() => println!("==== pytest -k {select}\n{out}"),
        _ => {
            let logs = cluster.logs();
            panic!(
                "pytest -k {select} failed ({}):\n{out}\nthe nodes' output:\n{logs}",
                status.map_or("killed after the timeout".to_string(), |s| s.to_string())
            );
        }
    }
    // A skipped test proves nothing: the driver gives what every test needs.
    assert!(
        !out.contains(" skipped") && out.contains(" passed"),
        "pytest -k {select} skipped tests or ran none:\n{out}"
    );
}

fn control_request(cluster: &mut Cluster, request: &str) -> String {
    let (verb, index) = request.split_once(' ').unwrap_or((request, ""));
    let Some(node) = index
        .parse::<usize>()
        .ok()
        .and_then(|i| cluster.nodes.get_mut(i))
    else {
        return format!("err bad request `{request}`");
    };
    match verb {
        "kill" => {
            node.kill();
            "ok".into()
        }
        "restart" => match node.start() {
            Ok(()) => "ok".into(),
            Err(e) => format!("err {}", e.replace('\n', " | ")),
        },
        _ => format!("err unknown request `{request}`"),
    }
}

#[test]
fn redis_py_and_cluster_client_suite() {
    require_tools!();
    let mut c = Cluster::start(&[
        "--durability",
        "memory",
        "--expected-fragments",
        EXPECTED_FRAGMENTS,
    ]);
    pytest(&mut c, "not node_loss", false);
    c.stop();
}

#[test]
fn node_loss_under_persisted_durability() {
    require_tools!();
    let mut c = Cluster::start(&[
        "--durability",
        "persisted",
        "--expected-fragments",
        EXPECTED_FRAGMENTS,
    ]);
    pytest(&mut c, "node_loss", true);
    c.stop();
}
