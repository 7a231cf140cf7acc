"""The network client (python/hotstore/client.py) against timeouts (found in review).

* A write whose reply is later than ``socket_timeout`` has an unknown outcome: the client
  reports the timeout. It used to keep redis-py's default Retry (3 retries on
  ConnectionError and TimeoutError): it reconnected (which gives back every claim the
  connection holds) and sent the command again, so a slow EVENT.ACK that took effect came
  back as AlreadyAckedError and a slow FRAG.PUT was sent twice.
* A blocking EVENT.NEXT (``block_ms``) waits on the server: the client's read waits that
  much longer than ``socket_timeout`` (as the Rust client and the cluster consumer do),
  forever for ``block_ms=0``; it used to fail with TimeoutError.

Run: ``HOTSTORE_BIN=target/release/hotstore python3 -m pytest tests/python/test_client_review.py``.
The tests that need a server start their own ``hotstore serve`` (``--port 0`` on 127.0.0.1,
store in /dev/shm) and stop it (SIGTERM); they are skipped when no hotstore binary is found
(``HOTSTORE_BIN``, else ``hotstore`` on PATH, else target/release or target/debug of this
repository or of ``CARGO_TARGET_DIR``). Needs redis-py 5 or later.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "python"))

redis = pytest.importorskip("redis")
from hotstore.client import HotstoreClient  # noqa: E402

SHM = "/dev/shm" if os.path.isdir("/dev/shm") else None
# How long a server may take to start or stop, and anything to happen before a test calls it
# a hang (a busy machine is slow).
HANG_S = 60.0


# --------------------------------------------------------------------------------------------
# A real server, started by the tests
# --------------------------------------------------------------------------------------------


def hotstore_bin():
    if os.environ.get("HOTSTORE_BIN"):
        return os.environ["HOTSTORE_BIN"]
    found = shutil.which("hotstore")
    if found:
        return found
    targets = [os.environ.get("CARGO_TARGET_DIR"), os.path.join(ROOT, "target")]
    for t in filter(None, targets):
        for profile in ("release", "debug"):
            p = os.path.join(t, profile, "hotstore")
            if os.access(p, os.X_OK):
                return p
    return None


class Server:
    """``hotstore serve --port 0`` on a fresh store; ``stop()`` sends SIGTERM (exit 0)."""

    def __init__(self, binary, *extra):
        self.dir = tempfile.mkdtemp(prefix="hotstore-client-review-", dir=SHM)
        self.proc = subprocess.Popen(
            [binary, "serve", "--dir", os.path.join(self.dir, "store"), "--port", "0", *extra],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        self.log = []
        found = threading.Event()
        self.port = None

        def drain():
            for raw in self.proc.stdout:
                line = raw.decode(errors="replace").rstrip("\n")
                self.log.append(line)
                addr = line.strip().removeprefix("hotstore: listening on ")
                if addr != line.strip() and not addr.startswith("unix:") and self.port is None:
                    self.port = int(addr.rsplit(":", 1)[1])
                    found.set()

        self.reader = threading.Thread(target=drain, daemon=True)
        self.reader.start()
        if not found.wait(HANG_S):
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError("hotstore serve did not start:\n" + "\n".join(self.log))

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(HANG_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            code = None
        self.reader.join(HANG_S)
        shutil.rmtree(self.dir, ignore_errors=True)
        assert code == 0, f"hotstore serve exited with {code} on SIGTERM:\n" + "\n".join(self.log)


@pytest.fixture(scope="module")
def server():
    binary = hotstore_bin()
    if binary is None:
        pytest.skip("no hotstore binary: set HOTSTORE_BIN (cargo build --release -p hotstore-cli)")
    s = Server(binary)
    yield s
    s.stop()


_runs = iter(range(1 + os.getpid() % 1000 * 1000, 1_000_000))


def seal_one(port):
    """Makes one event READY (a fragment, sealed); returns its run."""
    run = next(_runs)
    with HotstoreClient("127.0.0.1", port, socket_timeout=HANG_S) as p:
        p.frag_put(run, 1, 0, 0, b"x")
        p.event_seal(run, 1)
    return run


# --------------------------------------------------------------------------------------------
# No silent retry
# --------------------------------------------------------------------------------------------


def parse_command(buf):
    """One RESP array of bulk strings from the front of buf: (args, rest), or (None, buf)."""
    if not buf.startswith(b"*") or b"\r\n" not in buf:
        return None, buf
    head, rest = buf.split(b"\r\n", 1)
    args = []
    for _ in range(int(head[1:])):
        if b"\r\n" not in rest:
            return None, buf
        h, rest = rest.split(b"\r\n", 1)
        n = int(h[1:])
        if len(rest) < n + 2:
            return None, buf
        args.append(rest[:n])
        rest = rest[n + 2 :]
    return args, rest


class SlowWriteServer:
    """A fake hotstore: answers anything but `command` with +OK (redis-py's handshake),
    counts the `command`s it gets over all connections, never answers the first (a group
    commit longer than the client's socket_timeout) and answers a later one with `again`
    (what the real server answers to a repeat of a write that took effect)."""

    def __init__(self, command, again):
        self.command = command
        self.again = again
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.count = 0
        self.connections = 0
        self.conns = []
        self.lock = threading.Lock()
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.connections += 1
                self.conns.append(c)
            threading.Thread(target=self.serve, args=(c,), daemon=True).start()

    def serve(self, c):
        buf = b""
        while True:
            try:
                data = c.recv(65536)
            except OSError:
                return
            if not data:
                return
            buf += data
            while True:
                cmd, buf = parse_command(buf)
                if cmd is None:
                    break
                if cmd[0].upper() != self.command:
                    c.sendall(b"+OK\r\n")
                    continue
                with self.lock:
                    self.count += 1
                    n = self.count
                if n > 1:
                    c.sendall(self.again)

    def close(self):
        self.sock.close()
        with self.lock:
            for c in self.conns:
                try:
                    c.close()
                except OSError:
                    pass


@pytest.mark.parametrize(
    "command,again,call",
    [
        (
            b"EVENT.ACK",
            b"-ACKED event 1:42 was already acknowledged\r\n",
            lambda hs: hs.event_ack("00000001000000000000002a:1", remove=True),
        ),
        (
            b"FRAG.PUT",
            b"+OK\r\n",
            lambda hs: hs.frag_put(1, 42, 0, 0, b"v", durability="persisted"),
        ),
    ],
    ids=["event_ack", "frag_put_persisted"],
)
def test_a_timed_out_write_is_reported_not_sent_again(command, again, call):
    srv = SlowWriteServer(command, again)
    hs = HotstoreClient("127.0.0.1", srv.port, socket_timeout=0.5)
    try:
        with pytest.raises(redis.exceptions.TimeoutError):
            call(hs)
        assert srv.count == 1, f"{command.decode()} was sent {srv.count} times"
        assert srv.connections == 1, f"the client connected {srv.connections} times"
    finally:
        hs.close()
        srv.close()


def test_a_callers_retry_still_applies():
    """redis_kwargs override the default: a caller may ask for redis-py's retries."""
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    srv = SlowWriteServer(b"EVENT.ACK", b"+OK\r\n")
    hs = HotstoreClient("127.0.0.1", srv.port, socket_timeout=0.5, retry=Retry(NoBackoff(), 1))
    try:
        hs.event_ack("00000001000000000000002a:1", remove=True)  # answered the second time
        assert srv.count == 2
    finally:
        hs.close()
        srv.close()


# --------------------------------------------------------------------------------------------
# A blocking EVENT.NEXT waits longer than socket_timeout
# --------------------------------------------------------------------------------------------


def next_one(hs, many, **kw):
    if many:
        got = hs.event_next_many(10, **kw)
        assert len(got) <= 1
        return got[0] if got else None
    return hs.event_next(**kw)


@pytest.mark.parametrize("many", [False, True], ids=["event_next", "event_next_many"])
@pytest.mark.parametrize("protocol", [2, 3])
def test_a_block_longer_than_socket_timeout(server, many, protocol):
    """Nothing is READY: the server answers nil after BLOCK 5000, more than the socket's
    timeout of 3 s (the widened read waits socket_timeout + 5 s: 3 s of slack for a busy
    machine)."""
    hs = HotstoreClient("127.0.0.1", server.port, protocol=protocol, socket_timeout=3.0)
    try:
        sock = hs.redis.connection._sock
        t0 = time.monotonic()
        assert next_one(hs, many, lease_ms=1000, block_ms=5000) is None
        assert time.monotonic() - t0 >= 4.9
        # The same connection, its socket's timeout back to socket_timeout.
        assert hs.redis.connection._sock is sock and sock.gettimeout() == 3.0
        assert hs.ping()
        assert hs.redis.connection._sock is sock
    finally:
        hs.close()


@pytest.mark.parametrize("many", [False, True], ids=["event_next", "event_next_many"])
def test_block_0_waits_for_the_event_however_long(server, many):
    """block_ms=0 waits forever: no read timeout for that call. An event made READY 2 s
    later (4 times socket_timeout) is claimed, in one wait on the client's connection."""
    hs = HotstoreClient("127.0.0.1", server.port, socket_timeout=0.5)
    runs = []
    timer = threading.Timer(2.0, lambda: runs.append(seal_one(server.port)))
    try:
        sock = hs.redis.connection._sock
        timer.start()
        ev = next_one(hs, many, lease_ms=60000, block_ms=0)
        timer.join()
        assert ev is not None and (ev.run, ev.event) == (runs[0], 1)
        assert hs.redis.connection._sock is sock, "the wait went on on another connection"
        assert sock.gettimeout() == 0.5
        hs.event_ack(ev.token, remove=True)
    finally:
        timer.cancel()
        hs.close()


def test_a_blocking_next_keeps_the_claims_held(server):
    """A consumer holds a claim, then waits for the next event with a BLOCK longer than its
    socket_timeout: the wait used to time out and redis-py reconnected (its default Retry),
    which gave the held claim back to READY: its ack then failed with ClaimLostError."""
    run = seal_one(server.port)
    # BLOCK 4000 against a 3 s socket_timeout: the widened read leaves 3 s of slack.
    hs = HotstoreClient("127.0.0.1", server.port, socket_timeout=3.0)
    try:
        while True:
            ev = hs.event_next(lease_ms=60000)
            assert ev is not None
            if (ev.run, ev.event) == (run, 1):
                break
            hs.event_ack(ev.token, remove=True)  # left by a failed test
        assert hs.event_next(lease_ms=60000, block_ms=4000) is None
        hs.event_ack(ev.token, remove=True)  # the claim is still this connection's
    finally:
        hs.close()


# --------------------------------------------------------------------------------------------
# Found in a later review: the cluster client's default timeout, an empty event, the fields
# of groups()
# --------------------------------------------------------------------------------------------


class SilentNode:
    """A listening socket that accepts connections and never answers (a stopped process, a
    lost route): what a dead node looks like to a client that has no read timeout."""

    def __init__(self):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.accepted = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:  # closed
                return
            self.accepted.append(conn)

    def close(self):
        self.listener.close()
        for c in self.accepted:
            c.close()


def outcome_against_a_silent_node(call):
    """Runs ``call(port)`` against a :class:`SilentNode` on a thread and returns what it
    returned or raised, so that a hang fails the test (after HANG_S) instead of hanging it."""
    node = SilentNode()
    outcome = []
    done = threading.Event()

    def run():
        try:
            outcome.append(call(node.port))
        except BaseException as e:  # noqa: BLE001 - handed to the test
            outcome.append(e)
        done.set()

    try:
        threading.Thread(target=run, daemon=True).start()
        assert done.wait(HANG_S), "the client hung on a node that never answers"
    finally:
        node.close()
    (result,) = outcome
    return result, node.port


def test_cluster_client_times_out_on_a_silent_node(monkeypatch):
    """ClusterClient had no default socket_timeout: a node that accepts and never answers
    held the caller forever. Without socket_timeout it now waits
    ClusterClient.DEFAULT_SOCKET_TIMEOUT (30 s, made short here) and raises
    NodeUnavailableError."""
    from hotstore.cluster import ClusterClient, NodeUnavailableError

    assert ClusterClient.DEFAULT_SOCKET_TIMEOUT == 30.0
    monkeypatch.setattr(ClusterClient, "DEFAULT_SOCKET_TIMEOUT", 0.5, raising=False)
    err, port = outcome_against_a_silent_node(lambda port: ClusterClient("127.0.0.1", port))
    assert isinstance(err, NodeUnavailableError), repr(err)
    assert "Timeout" in str(err) and f"127.0.0.1:{port}" in str(err), str(err)
    assert "waiting up to 0.5 s" in str(err), str(err)


def test_the_single_node_client_times_out_on_a_silent_server(monkeypatch):
    """HotstoreClient had no default socket_timeout: a server that accepts and never answers
    held the caller forever. Without socket_timeout it now waits
    HotstoreClient.DEFAULT_SOCKET_TIMEOUT (30 s, made short here) and raises TimeoutError."""
    assert HotstoreClient.DEFAULT_SOCKET_TIMEOUT == 30.0
    monkeypatch.setattr(HotstoreClient, "DEFAULT_SOCKET_TIMEOUT", 0.5, raising=False)
    err, _ = outcome_against_a_silent_node(
        lambda port: HotstoreClient("127.0.0.1", port).redis.ping()
    )
    assert isinstance(err, redis.exceptions.TimeoutError), repr(err)


def test_an_empty_event_is_refused_by_the_server(server):
    """The server names events by the layout's fields (``7 42``) or their tag (``7:42``): an
    empty one is refused with an error saying what is wrong, never answered with fragments
    (the embedded ``event(b"")`` returned the whole store; tests/python/test_embedded_review.py)."""
    run = seal_one(server.port)
    with HotstoreClient("127.0.0.1", server.port, socket_timeout=HANG_S) as hs:
        r = hs.redis
        for args, says in [
            (("EVENT.GET", ""), "wrong number of arguments"),
            (("EVENT.GET", "", ""), "is not an unsigned integer"),
            (("EVENT.GET", ":"), "unsigned integers joined by ':'"),
            (("EVENT.GET", f"{run}:"), "unsigned integers joined by ':'"),
            (("EVENT.SEAL", ""), "wrong number of arguments"),
            (("FRAG.GET", "", "", "", ""), "is not an unsigned integer"),
        ]:
            with pytest.raises(redis.exceptions.ResponseError, match=says):
                r.execute_command(*args)
        assert [f.value for f in hs.event_get(run, 1)] == [b"x"]  # a real one still works


# The keys of a consumer group, as docs/protocol.md (EVENT.GROUPS) gives them.
GROUP_KEYS = [
    "acked",
    "consumers",
    "delivered",
    "lag",
    "name",
    "oldest-pending-ms",
    "oldest-waiting-ms",
    "pending",
    "poisoned",
    "required",
]

# The embedded store's groups(), run in another interpreter: this file puts python/ first on
# sys.path, where the package has no native part. Prints the sorted keys and value types.
EMBEDDED_GROUPS = r"""
import json, sys, tempfile, hotstore
with tempfile.TemporaryDirectory(dir=sys.argv[1]) as d:
    with hotstore.open(d + "/store", segment_size=1 << 20, durability="memory") as s:
        s.create_group("farm")
        s.create_group("monitor", required=False)
        g = s.groups()
        print(json.dumps([{k: type(v).__name__ for k, v in x.items()} for x in g]))
"""


def test_groups_have_the_same_keys_embedded_and_over_the_network(server):
    """groups() of the embedded store used the engine's names (delivered_total,
    oldest_waiting in seconds...), the network client's the protocol's: the same code did
    not work on both. Now both give the protocol's keys, with the same types."""
    with HotstoreClient("127.0.0.1", server.port, socket_timeout=HANG_S) as hs:
        name = f"keys-{os.getpid()}"
        hs.group_create(name, required=False)
        try:
            net = [g for g in hs.groups() if g["name"] == name]
        finally:
            hs.group_destroy(name)
    assert len(net) == 1 and sorted(net[0]) == GROUP_KEYS
    assert net[0]["required"] is False
    net_types = {k: type(v).__name__ for k, v in net[0].items()}
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    with tempfile.TemporaryDirectory() as cwd:
        probe = subprocess.run(
            [sys.executable, "-c", "import hotstore._hotstore"],
            cwd=cwd, env=env, capture_output=True, text=True,
        )
        if probe.returncode != 0:
            pytest.skip("the hotstore package with its native part is not installed "
                        "(pip install ./python): " + probe.stderr.strip().splitlines()[-1])
        out = subprocess.run(
            [sys.executable, "-c", EMBEDDED_GROUPS, SHM or tempfile.gettempdir()],
            cwd=cwd, env=env, capture_output=True, text=True, timeout=HANG_S,
        )
    assert out.returncode == 0, out.stderr
    embedded = json.loads(out.stdout)
    assert len(embedded) == 2
    for g in embedded:
        assert sorted(g) == GROUP_KEYS
        assert g == net_types, (g, net_types)
