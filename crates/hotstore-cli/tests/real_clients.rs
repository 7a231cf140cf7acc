//! Proves `hotstore serve` works with real Redis clients: redis-py through tests/python/test_server.py
//! (standard commands, pipelines, RESP3, AUTH, the DAQ commands through python/hotstore_client.py,
//! claims given back on disconnect, malformed input), a scripted redis-cli session compared with
//! expected text, and a redis-benchmark smoke run (tests/cli/redis_cli_session.sh). Each test starts
//! its own servers (`--port 0`, store in /dev/shm) and stops them with SIGTERM, which must exit 0.
//! The client tools are required: a missing one fails the test and says to run `scripts/test` (which installs them).
#![allow(clippy::unwrap_used, reason = "test code: a panic is how a test fails")]

mod common;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_hotstore");

/// How long a server may take to print its listening line.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a server may take to exit after SIGTERM.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Fails (does not skip) when a client tool is missing.
fn require_tools() {
    let checks: [(&str, &[&str], &str); 3] = [
        (
            "python3",
            &[
                "-c",
                "import redis, sys; sys.exit(int(redis.__version__.split('.')[0]) < 5)",
            ],
            "python3 with redis-py 5 or later (pip install -U redis)",
        ),
        (
            "redis-cli",
            &["--version"],
            "redis-cli (Debian package redis-tools)",
        ),
        (
            "redis-benchmark",
            &["--version"],
            "redis-benchmark (Debian package redis-tools)",
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
        assert!(
            ok,
            "{what} is missing: run `scripts/test` (it installs redis-tools, redis-server and redis-py), \
             or install it yourself; these tests need real Redis clients"
        );
    }
}

/// Collects a child's output lines (stdout and stderr interleaved as they come).
type Log = Arc<Mutex<String>>;

fn drain_into(
    stream: impl Read + Send + 'static,
    log: Log,
    tag: &'static str,
    found_port: Option<mpsc::Sender<u16>>,
) -> JoinHandle<()> {
    thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            if let Some(tx) = &found_port {
                if let Some(port) = listening_port(&line) {
                    let _ = tx.send(port);
                }
            }
            let mut log = log.lock().unwrap_or_else(|e| e.into_inner());
            log.push_str(tag);
            log.push_str(&line);
            log.push('\n');
        }
    })
}

/// The TCP port of a `hotstore: listening on 127.0.0.1:PORT` line.
fn listening_port(line: &str) -> Option<u16> {
    let addr = line.trim().strip_prefix("hotstore: listening on ")?;
    if addr.starts_with("unix:") {
        return None;
    }
    addr.rsplit_once(':')?.1.parse().ok()
}

/// A running `hotstore serve` on a fresh store; killed (SIGKILL) if dropped unstopped.
struct Server {
    child: Option<Child>,
    port: u16,
    log: Log,
    readers: Vec<JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl Server {
    fn start(extra: &[&str]) -> Server {
        let base = Path::new("/dev/shm");
        let dir = if base.is_dir() {
            tempfile::Builder::new()
                .prefix("hotstore-serve-")
                .tempdir_in(base)
        } else {
            tempfile::Builder::new().prefix("hotstore-serve-").tempdir()
        }
        .expect("temporary store directory");
        let store = dir.path().join("store");
        let mut child = Command::new(BIN)
            .arg("serve")
            .arg("--dir")
            .arg(&store)
            .args(["--port", "0"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start hotstore serve");
        let log: Log = Arc::default();
        let (tx, rx) = mpsc::channel();
        let readers = vec![
            drain_into(child.stdout.take().unwrap(), log.clone(), "", Some(tx)),
            drain_into(child.stderr.take().unwrap(), log.clone(), "[stderr] ", None),
        ];
        let mut server = Server {
            child: Some(child),
            port: 0,
            log,
            readers,
            _dir: dir,
        };
        match rx.recv_timeout(START_TIMEOUT) {
            Ok(port) => server.port = port,
            Err(_) => {
                let status = server.kill();
                panic!(
                    "hotstore serve {extra:?} printed no `hotstore: listening on 127.0.0.1:PORT` line \
                     within {START_TIMEOUT:?} (exit: {status:?}); its output:\n{}",
                    server.log()
                );
            }
        }
        server
    }

    fn log(&self) -> String {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn kill(&mut self) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        let _ = child.kill();
        let status = child.wait().ok();
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        status
    }

    /// SIGTERM; Ok(output) if the server exited 0 within STOP_TIMEOUT, else Err(why, output).
    fn stop(mut self) -> Result<String, String> {
        let mut child = self.child.take().expect("server running");
        let status = common::terminate(&mut child, STOP_TIMEOUT);
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        let port = self.port;
        let log = self.log();
        match status {
            Some(s) if s.code() == Some(0) => Ok(log),
            Some(s) => Err(format!(
                "hotstore serve (port {port}) exited with {s} after SIGTERM; its output:\n{log}"
            )),
            None => Err(format!(
                "hotstore serve (port {port}) did not exit within {STOP_TIMEOUT:?} of SIGTERM \
                 (killed); its output:\n{log}"
            )),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs `cmd` in the repository root, killing it after `timeout`; returns (success, output).
fn run(cmd: &mut Command, timeout: Duration) -> (bool, String) {
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
        drain_into(child.stdout.take().unwrap(), log.clone(), "", None),
        drain_into(child.stderr.take().unwrap(), log.clone(), "", None),
    ];
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait().expect("wait for child") {
            Some(status) => break Some(status),
            None if Instant::now() < deadline => thread::sleep(Duration::from_millis(50)),
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
    let mut out = log.lock().unwrap_or_else(|e| e.into_inner()).clone();
    match status {
        Some(s) if s.success() => (true, out),
        Some(s) => {
            out.push_str(&format!("\n[{what} exited with {s}]\n"));
            (false, out)
        }
        None => {
            out.push_str(&format!("\n[{what} killed after {timeout:?}]\n"));
            (false, out)
        }
    }
}

/// Stops the servers (SIGTERM), then requires that the client run succeeded and that every
/// server exited 0; prints the client output, and on failure the servers' output too.
fn finish(name: &str, (ok, out): (bool, String), servers: Vec<Server>) {
    let stops: Vec<Result<String, String>> = servers.into_iter().map(Server::stop).collect();
    if !ok {
        let logs: Vec<String> = stops
            .iter()
            .map(|r| match r {
                Ok(log) => format!("---- server output (exited 0 on SIGTERM):\n{log}"),
                Err(e) => format!("---- {e}"),
            })
            .collect();
        panic!("{name} failed:\n{out}\n{}", logs.join("\n"));
    }
    println!("==== {name}\n{out}");
    for r in stops {
        if let Err(e) = r {
            panic!("{e}");
        }
    }
}

fn script() -> PathBuf {
    repo_root().join("tests/cli/redis_cli_session.sh")
}

#[test]
fn redis_py_suite() {
    require_tools();
    let plain = Server::start(&[]);
    let password = format!("pw-{}-{}", std::process::id(), rand::random::<u32>());
    let locked = Server::start(&["--requirepass", &password]);
    let result = run(
        Command::new("python3")
            .arg("tests/python/test_server.py")
            .arg("-v")
            .env("HOTSTORE_HOST", "127.0.0.1")
            .env("HOTSTORE_PORT", plain.port.to_string())
            .env("HOTSTORE_PASSWORD_PORT", locked.port.to_string())
            .env("HOTSTORE_PASSWORD", &password),
        Duration::from_secs(600),
    );
    finish(
        "python3 tests/python/test_server.py",
        result,
        vec![plain, locked],
    );
}

/// The Python client against timeouts (tests/python/test_client_review.py): it starts its own
/// server with this binary.
#[test]
fn python_client_timeouts() {
    require_tools();
    let result = run(
        Command::new("python3")
            .args(["-m", "pytest", "-p", "no:cacheprovider", "-v", "-rs"])
            .arg("tests/python/test_client_review.py")
            .env("HOTSTORE_BIN", BIN),
        Duration::from_secs(600),
    );
    finish(
        "python3 -m pytest tests/python/test_client_review.py",
        result,
        Vec::new(),
    );
}

#[test]
fn redis_cli_session() {
    require_tools();
    let server = Server::start(&[]);
    let result = run(
        Command::new("bash")
            .arg(script())
            .arg("session")
            .env("HOTSTORE_PORT", server.port.to_string()),
        Duration::from_secs(300),
    );
    finish(
        "tests/cli/redis_cli_session.sh session",
        result,
        vec![server],
    );
}

/// docs/protocol.md's redis-cli session runs as written (one connection, on a fresh server).
#[test]
fn protocol_doc_session_runs_as_written() {
    require_tools();
    let server = Server::start(&[]);
    let result = run(
        Command::new("bash")
            .arg(script())
            .arg("docs")
            .env("HOTSTORE_PORT", server.port.to_string()),
        Duration::from_secs(300),
    );
    finish("tests/cli/redis_cli_session.sh docs", result, vec![server]);
}

#[test]
fn redis_benchmark_smoke() {
    require_tools();
    let server = Server::start(&[]);
    let result = run(
        Command::new("bash")
            .arg(script())
            .arg("bench")
            .env("HOTSTORE_PORT", server.port.to_string()),
        Duration::from_secs(300),
    );
    finish("tests/cli/redis_cli_session.sh bench", result, vec![server]);
}

#[test]
fn redis_cli_session_with_password() {
    require_tools();
    let password = format!("pw-{}-{}", std::process::id(), rand::random::<u32>());
    let server = Server::start(&["--requirepass", &password]);
    let result = run(
        Command::new("bash")
            .arg(script())
            .arg("all")
            .env("HOTSTORE_PORT", server.port.to_string())
            .env("HOTSTORE_PASSWORD", &password),
        Duration::from_secs(300),
    );
    finish(
        "tests/cli/redis_cli_session.sh all (with --requirepass)",
        result,
        vec![server],
    );
}

#[test]
fn listening_line_is_parsed() {
    assert_eq!(
        listening_port("hotstore: listening on 127.0.0.1:40123"),
        Some(40123)
    );
    assert_eq!(
        listening_port("hotstore: listening on unix:/tmp/x.sock"),
        None
    );
    assert_eq!(listening_port("hotstore: metrics on 127.0.0.1:9100"), None);
}
