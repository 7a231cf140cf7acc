#!/usr/bin/env python3
"""Real-client tests of ``hotstore serve``: redis-py and raw sockets against docs/protocol.md.

Run against a running server (``crates/hotstore-cli/tests/real_clients.rs`` starts one)::

    HOTSTORE_PORT=6380 [HOTSTORE_HOST=127.0.0.1] \
    [HOTSTORE_PASSWORD_PORT=6381 HOTSTORE_PASSWORD=secret] \
    python3 tests/python/test_server.py -v

``HOTSTORE_PORT`` is a server without a password; the optional second one was started with
``--requirepass $HOTSTORE_PASSWORD`` (the AUTH tests are skipped without it). The DAQ tests
expect that no other client claims events on the server while they run. Needs redis-py
(``pip install redis``; ``scripts/test`` installs it).
"""

import os
import random
import socket
import struct
import sys
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

try:
    import redis
    from redis.backoff import NoBackoff
    from redis.exceptions import AuthenticationError, ResponseError
    from redis.retry import Retry
except ImportError:  # pragma: no cover
    sys.exit("redis-py is missing: pip install redis (or run scripts/test, which installs it)")
if int(redis.__version__.split(".")[0]) < 5:  # pragma: no cover
    sys.exit("redis-py %s is too old (RESP3 needs 5 or later): pip install -U redis" % redis.__version__)

from hotstore_client import (  # noqa: E402
    AlreadyAckedError,
    ClaimedEvent,
    ClaimLostError,
    EventInfo,
    HotstoreClient,
    HotstoreError,
    LateFragmentError,
    NoEventError,
    NoGroupError,
    StoreFullError,
    StoreIOError,
    map_error,
)

HOST = os.environ.get("HOTSTORE_HOST", "127.0.0.1")
if "HOTSTORE_PORT" not in os.environ:
    sys.exit("HOTSTORE_PORT is not set: start `hotstore serve --dir DIR --port 0` and pass its port")
PORT = int(os.environ["HOTSTORE_PORT"])
PW_PORT = int(os.environ["HOTSTORE_PASSWORD_PORT"]) if os.environ.get("HOTSTORE_PASSWORD_PORT") else None
PASSWORD = os.environ.get("HOTSTORE_PASSWORD")

# A tag that keeps keys of this run apart from anything else on the server. Fixed length, so
# that no key of these tests is 16 bytes long: a key of the store's fragment key length (16 with
# the default layout) is a fragment, and would make an event the DAQ tests would be offered.
TAG = "t%08d%010d" % (os.getpid() % 10**8, random.randrange(10**10))

STATS_NAMES = [
    "entries", "live_bytes", "dead_bytes", "capacity_bytes", "file_bytes", "puts", "removes",
    "full_errors", "events_open", "events_ready", "events_claimed", "events_kept",
    "events_incomplete", "late_fragments", "events_removed", "events_kept_total",
    "leases_expired", "claims_released", "events_timed_out", "power_safe_tiers", "tiers",
]

DOCUMENTED_COMMANDS = [
    "ping", "echo", "hello", "auth", "select", "set", "get", "del", "exists", "mget", "mset",
    "strlen", "type", "dbsize", "scan", "info", "config", "client", "command", "quit",
    "shutdown", "frag.put", "frag.get", "event.get", "event.seal", "event.next", "event.ack",
    "event.release", "event.range", "store.stats",
]


def client(port=PORT, **kw):
    """A redis-py client (bytes replies unless told, RESP2 unless told: redis-py 8 defaults
    to RESP3) that fails fast instead of retrying."""
    kw.setdefault("protocol", 2)
    kw.setdefault("socket_timeout", 15)
    kw.setdefault("retry", Retry(NoBackoff(), 0))
    return redis.Redis(host=HOST, port=port, **kw)


def bare_client(port, **kw):
    """A redis-py client that sends nothing on connect (no CLIENT SETINFO), like a minimal
    client would, so that the first command decides what the server answers."""
    try:
        return client(port, driver_info=None, **kw)
    except TypeError:  # redis-py before driver_info
        return client(port, lib_name=None, lib_version=None, **kw)


# --------------------------------------------------------------------------------------------
# A minimal raw RESP connection, to see exactly what goes over the wire
# --------------------------------------------------------------------------------------------


def encode(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class Raw:
    """A socket speaking RESP by hand: ``send`` bytes, ``reply()`` parses one reply (RESP2 or
    RESP3) into Python values; errors come back as ``("error", text)``."""

    def __init__(self, port=PORT, timeout=10):
        self.sock = socket.create_connection((HOST, port), timeout=timeout)
        self.buf = b""

    def close(self):
        self.sock.close()

    def send(self, data):
        self.sock.sendall(data)

    def cmd(self, *args):
        self.send(encode(*args))
        return self.reply()

    def _fill(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise EOFError("connection closed by the server")
        self.buf += chunk

    def _line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _bytes(self, n):
        while len(self.buf) < n + 2:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def raw_reply_type(self):
        """The first byte of the next reply, without consuming it."""
        while not self.buf:
            self._fill()
        return self.buf[:1]

    def reply(self):
        line = self._line()
        t, rest = line[:1], line[1:]
        if t == b"+":
            return rest.decode()
        if t == b"-":
            return ("error", rest.decode())
        if t == b":":
            return int(rest)
        if t in (b"$", b"="):
            n = int(rest)
            return None if n < 0 else self._bytes(n)
        if t in (b"*", b"~", b">"):
            n = int(rest)
            return None if n < 0 else [self.reply() for _ in range(n)]
        if t in (b"%", b"|"):
            n = int(rest)
            return {self._key(self.reply()): self.reply() for _ in range(n)}
        if t == b"_":
            return None
        if t == b"#":
            return rest == b"t"
        if t == b",":
            return float(rest)
        if t == b"(":
            return int(rest)
        raise AssertionError("unexpected reply line %r" % line)

    @staticmethod
    def _key(k):
        return k.decode() if isinstance(k, bytes) else k

    def read_until_eof(self, timeout=5):
        """Everything the server sends until it closes the connection; fails on timeout."""
        self.sock.settimeout(timeout)
        data = self.buf
        self.buf = b""
        while True:
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                raise AssertionError("the server did not close the connection; got %r" % data)
            except ConnectionResetError:
                return data
            if not chunk:
                return data
            data += chunk


def to_str_dict(d):
    return {(k.decode() if isinstance(k, bytes) else k): v for k, v in d.items()}


# --------------------------------------------------------------------------------------------
# hotstore_client's error mapping (no server needed)
# --------------------------------------------------------------------------------------------


class T0ErrorMapping(unittest.TestCase):
    def test_codes_map_to_typed_exceptions(self):
        for code, cls in [
            ("FULL", StoreFullError),
            ("LATE", LateFragmentError),
            ("CLAIMLOST", ClaimLostError),
            ("NOEVENT", NoEventError),
            ("ACKED", AlreadyAckedError),
            ("IOERR", StoreIOError),
        ]:
            e = map_error(ResponseError("%s some text here" % code))
            self.assertIsInstance(e, cls)
            self.assertIsInstance(e, HotstoreError)
            self.assertIsInstance(e, ResponseError)
            self.assertEqual(e.code, code)
            self.assertEqual(e.message, "some text here")
            self.assertEqual(str(e), "%s some text here" % code)

    def test_other_errors_stay_response_errors(self):
        for text in ["unknown command 'X'", "FULLY not ours", "LATER", "wrong number"]:
            e = ResponseError(text)
            self.assertIs(map_error(e), e)


# --------------------------------------------------------------------------------------------
# Standard commands through redis-py (RESP2)
# --------------------------------------------------------------------------------------------


class T1StandardCommands(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.r = client()

    @classmethod
    def tearDownClass(cls):
        cls.r.close()

    def k(self, name):
        return "std:%s:%s" % (TAG, name)

    def test_ping_echo(self):
        self.assertTrue(self.r.ping())
        raw = Raw()
        try:
            self.assertEqual(raw.cmd("PING"), "PONG")
            self.assertEqual(raw.cmd("PING", "hello"), b"hello")
        finally:
            raw.close()
        self.assertEqual(self.r.echo("hi there"), b"hi there")
        self.assertEqual(self.r.echo(b"\x00\r\n\xff"), b"\x00\r\n\xff")

    def test_set_get_del_exists(self):
        a, b, missing = self.k("a"), self.k("b"), self.k("missing")
        self.assertTrue(self.r.set(a, "1"))
        self.assertTrue(self.r.set(b, "two"))
        self.assertEqual(self.r.get(a), b"1")
        self.assertIsNone(self.r.get(missing))
        self.assertTrue(self.r.set(a, "overwritten"))
        self.assertEqual(self.r.get(a), b"overwritten")
        self.assertEqual(self.r.exists(a, b, missing), 2)
        self.assertEqual(self.r.exists(a, a), 2, "EXISTS counts repeated keys, as in Redis")
        self.assertEqual(self.r.delete(a, missing), 1)
        self.assertEqual(self.r.exists(a), 0)
        self.assertIsNone(self.r.get(a))
        self.assertEqual(self.r.delete(a), 0)
        self.assertEqual(self.r.delete(b), 1)

    def test_binary_empty_and_large_values(self):
        k = self.k("bin")
        for v in [b"", b"\x00\r\n\xff" * 100, os.urandom(1 << 20)]:
            self.assertTrue(self.r.set(k, v))
            self.assertEqual(self.r.get(k), v)
            self.assertEqual(self.r.strlen(k), len(v))
        kb = ("std:%s:bin\x00key\r\n" % TAG).encode() + b"\xff"
        self.assertTrue(self.r.set(kb, b"v"))
        self.assertEqual(self.r.get(kb), b"v")
        self.assertEqual(self.r.delete(kb, k), 2)

    def test_mset_mget(self):
        keys = [self.k("m%d" % i) for i in range(5)]
        self.assertTrue(self.r.mset({k: "v%d" % i for i, k in enumerate(keys)}))
        got = self.r.mget(keys[0], self.k("nope"), *keys[1:])
        self.assertEqual(got, [b"v0", None, b"v1", b"v2", b"v3", b"v4"])
        self.assertEqual(self.r.delete(*keys), 5)

    def test_strlen_type(self):
        k = self.k("s")
        self.r.set(k, "twelve bytes")
        self.assertEqual(self.r.strlen(k), 12)
        self.assertEqual(self.r.strlen(self.k("nope")), 0)
        self.assertEqual(self.r.type(k), b"string")
        self.assertEqual(self.r.type(self.k("nope")), b"none")
        self.r.delete(k)

    def test_dbsize(self):
        before = self.r.dbsize()
        self.assertIsInstance(before, int)
        self.r.set(self.k("d1"), "x")
        self.r.set(self.k("d2"), "x")
        self.assertEqual(self.r.dbsize(), before + 2)
        self.r.set(self.k("d1"), "y")  # overwrite: no new key
        self.assertEqual(self.r.dbsize(), before + 2)
        self.r.delete(self.k("d1"), self.k("d2"))
        self.assertEqual(self.r.dbsize(), before)

    def test_select_0(self):
        self.assertTrue(self.r.execute_command("SELECT", 0))

    def test_scan_match_count(self):
        keys = {("scan:%s:%03d" % (TAG, i)).encode() for i in range(250)}
        self.r.mset({k: b"x" for k in keys})
        try:
            other = self.k("not-scanned")
            self.r.set(other, "x")
            found = list(self.r.scan_iter(match="scan:%s:*" % TAG, count=17))
            self.assertEqual(len(found), len(set(found)), "SCAN returned a key twice")
            self.assertEqual(set(found), keys)
            # COUNT is a hint, but a cursor scan of >= 250 keys with COUNT 10 takes several calls
            cursor, calls, seen = 0, 0, set()
            while True:
                cursor, batch = self.r.scan(cursor, count=10)
                calls += 1
                seen.update(batch)
                if cursor == 0:
                    break
                self.assertLess(calls, 100000, "SCAN does not terminate")
            self.assertGreater(calls, 1)
            self.assertTrue(keys <= seen)
            self.assertIn(other.encode(), seen)
            # MATCH with ? and [] as in Redis glob patterns
            q = set(self.r.scan_iter(match="scan:%s:00?" % TAG, count=1000))
            self.assertEqual(q, {("scan:%s:%03d" % (TAG, i)).encode() for i in range(10)})
            br = set(self.r.scan_iter(match="scan:%s:1[0-1]0" % TAG))
            self.assertEqual(br, {("scan:%s:100" % TAG).encode(), ("scan:%s:110" % TAG).encode()})
            self.assertEqual(list(self.r.scan_iter(match="scan:%s:nomatch*" % TAG)), [])
            self.r.delete(other)
        finally:
            self.r.delete(*keys)

    def test_scan_visits_every_key(self):
        self.r.set(self.k("sv"), "x")
        try:
            allkeys = list(self.r.scan_iter(count=100))
            self.assertEqual(len(allkeys), len(set(allkeys)))
            self.assertEqual(len(allkeys), self.r.dbsize())
        finally:
            self.r.delete(self.k("sv"))

    def test_info_sections(self):
        default = self.r.info()
        self.assertIn("redis_version", default)
        server = self.r.info("server")
        self.assertIn("redis_version", server)
        self.assertEqual(int(server.get("tcp_port", PORT)), PORT)
        clients = self.r.info("clients")
        self.assertGreaterEqual(int(clients["connected_clients"]), 1)
        hs = self.r.info("hotstore")
        self.assertTrue(hs, "INFO hotstore is empty")
        self.assertTrue(
            any("tier" in k for k in hs),
            "INFO hotstore should say which tiers survive a power cut: %r" % hs,
        )
        raw = self.r.execute_command("INFO", "hotstore")
        raw = raw.decode() if isinstance(raw, bytes) else raw
        if isinstance(raw, str):  # redis-py parses INFO; only check the header if it did not
            self.assertIn("# Hotstore", raw)
        self.assertEqual(self.r.info("nosuchsection"), {})

    def test_config_get(self):
        allcfg = self.r.config_get("*")
        self.assertIsInstance(allcfg, dict)
        self.assertTrue(allcfg, "CONFIG GET * is empty")
        for name, value in list(allcfg.items())[:10]:
            self.assertEqual(self.r.config_get(name), {name: value})
        self.assertEqual(self.r.config_get("no-such-parameter-xyz"), {})
        some = next(iter(allcfg))
        sub = self.r.config_get(some[:2] + "*")
        self.assertIn(some, sub)
        self.assertTrue(all(k.startswith(some[:2]) for k in sub))

    def test_client_commands(self):
        c = client(decode_responses=True, single_connection_client=True)
        try:
            self.assertIsNone(c.client_getname())
            self.assertTrue(c.client_setname("py-test-%s" % TAG))
            self.assertEqual(c.client_getname(), "py-test-%s" % TAG)
            cid = c.client_id()
            self.assertIsInstance(cid, int)
            listed = [e for e in c.client_list() if int(e["id"]) == cid]
            self.assertEqual(len(listed), 1, c.client_list())
            self.assertEqual(listed[0]["name"], "py-test-%s" % TAG)
            self.assertIn("addr", listed[0])
            info = c.client_info()
            self.assertEqual(int(info["id"]), cid)
            # another connection has another id
            self.assertNotEqual(self.r.client_id(), cid)
        finally:
            c.close()

    def test_command_count_and_list(self):
        n = self.r.command_count()
        self.assertGreaterEqual(n, len(DOCUMENTED_COMMANDS))
        cmds = {k.lower(): v for k, v in self.r.command().items()}
        self.assertEqual(len(cmds), n)
        for name in DOCUMENTED_COMMANDS:
            self.assertIn(name, cmds)
        self.assertEqual(cmds["get"]["arity"], 2)
        self.assertEqual(cmds["set"]["arity"], -3)
        self.assertEqual(cmds["get"]["first_key_pos"], 1)
        self.assertEqual(cmds["mget"]["last_key_pos"], -1)

    def test_command_docs(self):
        raw = Raw()  # redis-py parses every COMMAND reply as the command table
        try:
            # redis-cli asks for COMMAND DOCS at start for its hints and falls back to its own
            # help on an empty reply: an array of name, doc pairs (possibly none) is what it needs
            docs = raw.cmd("COMMAND", "DOCS", "GET")
            self.assertIsInstance(docs, list, docs)
            self.assertEqual(len(docs) % 2, 0, docs)
            self.assertTrue(set(x.decode().lower() for x in docs[0::2]) <= {"get"}, docs)
            self.assertIsInstance(raw.cmd("COMMAND", "DOCS"), list)
        finally:
            raw.close()

    def test_set_options_refused(self):
        k = self.k("opt")
        self.r.set(k, "before")
        for kwargs, opt in [({"ex": 10}, "EX"), ({"px": 100}, "PX"), ({"nx": True}, "NX"),
                            ({"xx": True}, "XX"), ({"get": True}, "GET")]:
            with self.assertRaises(ResponseError) as cm:
                self.r.set(k, "after", **kwargs)
            self.assertEqual(str(cm.exception), "hotstore does not support SET option '%s'" % opt)
            self.assertEqual(self.r.get(k), b"before", "a refused SET must not write")
        self.r.delete(k)

    def test_unknown_command_text_as_redis(self):
        with self.assertRaises(ResponseError) as cm:
            self.r.execute_command("NOSUCHCMD", "a", "b")
        self.assertEqual(
            str(cm.exception), "unknown command 'NOSUCHCMD', with args beginning with: 'a' 'b' "
        )
        with self.assertRaises(ResponseError) as cm:
            self.r.execute_command("NOSUCHCMD")
        self.assertEqual(str(cm.exception), "unknown command 'NOSUCHCMD', with args beginning with: ")

    def test_wrong_arity(self):
        with self.assertRaises(ResponseError) as cm:
            self.r.execute_command("GET")
        self.assertIn("wrong number of arguments", str(cm.exception))
        self.assertTrue(self.r.ping(), "the connection stays usable after an error")

    def test_pipeline_1000_sets(self):
        keys = ["pipe:%s:%04d" % (TAG, i) for i in range(1000)]
        pipe = self.r.pipeline(transaction=False)
        for i, k in enumerate(keys):
            pipe.set(k, "value-%d" % i)
        self.assertEqual(pipe.execute(), [True] * 1000)
        pipe = self.r.pipeline(transaction=False)
        for k in keys:
            pipe.get(k)
        self.assertEqual(pipe.execute(), [("value-%d" % i).encode() for i in range(1000)])
        self.assertEqual(self.r.mget(keys), [("value-%d" % i).encode() for i in range(1000)])
        self.assertEqual(self.r.delete(*keys), 1000)

    def test_pipeline_replies_in_order_with_errors(self):
        k = self.k("pe")
        pipe = self.r.pipeline(transaction=False)
        pipe.set(k, "1")
        pipe.execute_command("NOSUCHCMD")
        pipe.get(k)
        pipe.execute_command("GET")
        pipe.echo("last")
        res = pipe.execute(raise_on_error=False)
        self.assertEqual(res[0], True)
        self.assertIsInstance(res[1], ResponseError)
        self.assertEqual(res[2], b"1")
        self.assertIsInstance(res[3], ResponseError)
        self.assertEqual(res[4], b"last")
        self.r.delete(k)

    def test_concurrent_clients(self):
        errors = []

        def worker(n):
            try:
                c = client()
                for i in range(200):
                    k = "conc:%s:%d:%d" % (TAG, n, i)
                    c.set(k, "%d-%d" % (n, i))
                    if c.get(k) != ("%d-%d" % (n, i)).encode():
                        errors.append((n, i))
                    c.delete(k)
                c.close()
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        self.assertEqual(errors, [])


# --------------------------------------------------------------------------------------------
# RESP3
# --------------------------------------------------------------------------------------------


class T2Resp3(unittest.TestCase):
    def test_hello3_is_a_map_on_the_wire(self):
        raw = Raw()
        try:
            raw.send(encode("HELLO", "3"))
            self.assertEqual(raw.raw_reply_type(), b"%")
            hello = raw.reply()
            self.assertEqual(hello["proto"], 3)
            for field in ["server", "version", "id"]:
                self.assertIn(field, hello)
            # RESP3 types after HELLO 3: null, map
            self.assertIsNone(raw.cmd("GET", "nokey:%s" % TAG))
            raw.send(encode("STORE.STATS"))
            self.assertEqual(raw.raw_reply_type(), b"%")
            stats = raw.reply()
            self.assertIn("entries", stats)
            raw.send(encode("CONFIG", "GET", "*"))
            self.assertEqual(raw.raw_reply_type(), b"%")
            raw.reply()
            # and back to RESP2
            raw.send(encode("HELLO", "2"))
            self.assertEqual(raw.raw_reply_type(), b"*")
            hello2 = raw.reply()
            self.assertIn(b"proto", hello2)
            self.assertEqual(hello2[hello2.index(b"proto") + 1], 2)
            raw.send(encode("GET", "nokey:%s" % TAG))
            self.assertEqual(raw.raw_reply_type(), b"$")
            self.assertIsNone(raw.reply())
            raw.send(encode("STORE.STATS"))
            self.assertEqual(raw.raw_reply_type(), b"*")
        finally:
            raw.close()

    def test_hello_bad_version(self):
        raw = Raw()
        try:
            r = raw.cmd("HELLO", "4")
            self.assertIsInstance(r, tuple, "HELLO 4 must be refused: %r" % (r,))
            self.assertEqual(raw.cmd("PING"), "PONG")
        finally:
            raw.close()

    def test_redis_py_resp3(self):
        r3 = client(protocol=3)
        try:
            self.assertTrue(r3.ping())
            hello = to_str_dict(r3.execute_command("HELLO", "3"))
            self.assertEqual(hello["proto"], 3)
            self.assertIn("server", hello)
            k = "r3:%s" % TAG
            self.assertTrue(r3.set(k, "v"))
            self.assertEqual(r3.get(k), b"v")
            self.assertIsNone(r3.get(k + ":missing"))
            self.assertEqual(r3.mget(k, k + ":missing"), [b"v", None])
            self.assertEqual(r3.delete(k), 1)
            stats = r3.execute_command("STORE.STATS")
            self.assertIsInstance(stats, dict)
            stats = to_str_dict(stats)
            for name in STATS_NAMES:
                self.assertIn(name, stats)
            self.assertIsInstance(r3.config_get("*"), dict)
            self.assertTrue(r3.info("server"))
        finally:
            r3.close()

    def test_client_store_stats_same_under_resp2_and_resp3(self):
        with HotstoreClient(HOST, PORT, protocol=2) as h2, HotstoreClient(HOST, PORT, protocol=3) as h3:
            s2, s3 = h2.store_stats(), h3.store_stats()
            self.assertEqual(set(s2), set(s3))
            for name in STATS_NAMES:
                self.assertIn(name, s2)
            self.assertEqual(s2["capacity_bytes"], s3["capacity_bytes"])


# --------------------------------------------------------------------------------------------
# AUTH (a second server started with --requirepass)
# --------------------------------------------------------------------------------------------


@unittest.skipUnless(PW_PORT and PASSWORD, "HOTSTORE_PASSWORD_PORT/HOTSTORE_PASSWORD not set")
class T3Auth(unittest.TestCase):
    def test_noauth_on_the_wire(self):
        raw = Raw(PW_PORT)
        try:
            for args in [("GET", "x"), ("PING",), ("FRAG.GET", 1, 2, 3, 4), ("STORE.STATS",)]:
                r = raw.cmd(*args)
                self.assertIsInstance(r, tuple, "%r answered %r before AUTH" % (args, r))
                self.assertTrue(r[1].startswith("NOAUTH"), r)
            r = raw.cmd("AUTH", "wrong-" + PASSWORD)
            self.assertTrue(r[1].startswith("WRONGPASS"), r)
            r = raw.cmd("GET", "x")
            self.assertTrue(r[1].startswith("NOAUTH"), "still not authenticated: %r" % (r,))
            self.assertEqual(raw.cmd("AUTH", PASSWORD), "OK")
            self.assertEqual(raw.cmd("PING"), "PONG")
            self.assertEqual(raw.cmd("SET", "auth:%s" % TAG, "v"), "OK")
            self.assertEqual(raw.cmd("GET", "auth:%s" % TAG), b"v")
            self.assertEqual(raw.cmd("DEL", "auth:%s" % TAG), 1)
        finally:
            raw.close()

    def test_noauth_redis_py(self):
        c = bare_client(PW_PORT)
        try:
            with self.assertRaises(AuthenticationError) as cm:
                c.get("x")
            self.assertEqual(cm.exception.status_code, "NOAUTH")
        finally:
            c.close()

    def test_auth_command_flow_redis_py(self):
        c = bare_client(PW_PORT, single_connection_client=True)
        try:
            with self.assertRaises(AuthenticationError) as cm:
                c.execute_command("AUTH", "wrong-" + PASSWORD)
            self.assertEqual(cm.exception.status_code, "WRONGPASS")
        finally:
            c.close()
        c = bare_client(PW_PORT, single_connection_client=True)
        try:
            self.assertTrue(c.execute_command("AUTH", PASSWORD))
            self.assertTrue(c.ping())
            self.assertTrue(c.execute_command("AUTH", "default", PASSWORD))
            self.assertTrue(c.set("auth2:%s" % TAG, "v"))
            self.assertEqual(c.get("auth2:%s" % TAG), b"v")
            self.assertEqual(c.delete("auth2:%s" % TAG), 1)
        finally:
            c.close()

    def test_password_option_resp2_and_resp3(self):
        for proto in (2, 3):
            c = client(PW_PORT, password=PASSWORD, protocol=proto)
            try:
                self.assertTrue(c.ping())
                self.assertIsNone(c.get("nokey:%s" % TAG))
            finally:
                c.close()
            c = client(PW_PORT, password="wrong-" + PASSWORD, protocol=proto)
            try:
                with self.assertRaises(AuthenticationError) as cm:
                    c.ping()
                self.assertEqual(cm.exception.status_code, "WRONGPASS")
            finally:
                c.close()

    def test_hello_auth(self):
        raw = Raw(PW_PORT)
        try:
            r = raw.cmd("HELLO", "3", "AUTH", "default", "wrong-" + PASSWORD)
            self.assertTrue(r[1].startswith("WRONGPASS"), r)
            hello = raw.cmd("HELLO", "3", "AUTH", "default", PASSWORD, "SETNAME", "hello-auth")
            self.assertEqual(hello["proto"], 3)
            self.assertEqual(raw.cmd("CLIENT", "GETNAME"), b"hello-auth")
        finally:
            raw.close()

    def test_daq_client_with_password(self):
        for proto in (2, 3):
            with HotstoreClient(HOST, PW_PORT, password=PASSWORD, protocol=proto) as hs:
                self.assertTrue(hs.ping())
                self.assertIn("entries", hs.store_stats())


# --------------------------------------------------------------------------------------------
# DAQ commands through hotstore_client.py
# --------------------------------------------------------------------------------------------

_run_counter = [random.randrange(1000, 1 << 31)]


def next_run():
    _run_counter[0] += 1
    return _run_counter[0]


def drain(hs):
    """Consumes (acks REMOVE) every READY event, so that a test's EVENT.NEXT sees its own."""
    while True:
        ev = hs.event_next(lease_ms=60000)
        if ev is None:
            return
        hs.event_ack(ev.token, remove=True)


class T4Daq(unittest.TestCase):
    """The DAQ commands. When an event with some fragments becomes READY on its own depends on
    the store's event policy, which the protocol does not set (the engine's default makes each
    fragment a complete event); the tests seal events before claiming them, and check the
    OPEN state only where the store keeps unsealed events OPEN (``OPEN_UNTIL_SEALED``)."""

    OPEN_UNTIL_SEALED = None

    @classmethod
    def setUpClass(cls):
        with HotstoreClient(HOST, PORT) as hs:
            run = next_run()
            hs.frag_put(run, 1, 0, 0, b"probe")
            [row] = hs.event_range(run, 0, 10)
            cls.OPEN_UNTIL_SEALED = row.state == "open"
            print("\n[hotstore] an unsealed event with one fragment is %s" % row.state.upper(),
                  file=sys.stderr)
            hs.event_seal(run, 1)
            drain(hs)

    def setUp(self):
        self.hs = HotstoreClient(HOST, PORT, socket_timeout=20)
        # Events left READY by an earlier failure would be offered first: consume them.
        drain(self.hs)
        self.run_no = next_run()

    def tearDown(self):
        try:
            for row in self.hs.event_range(self.run_no, 0, (1 << 64) - 1):
                if row.state == "open":
                    self.hs.event_seal(self.run_no, row.event)
            drain(self.hs)
        finally:
            self.hs.close()

    def put_event(self, event, n=2, size=None, seal=True):
        frags = []
        for d in range(n):
            v = (b"r%d e%d d%d " % (self.run_no, event, d)) * (1 if size is None else size)
            self.hs.frag_put(self.run_no, event, d, 0, v)
            frags.append((d, 0, v))
        if seal:
            self.hs.event_seal(self.run_no, event)
        return frags

    def test_frag_put_get_roundtrip(self):
        values = [b"", b"\x00\r\n\xff" * 7, os.urandom(100_000)]
        for c, v in enumerate(values):
            self.assertIsNone(self.hs.frag_put(self.run_no, 1, 3, c, v))
        for c, v in enumerate(values):
            self.assertEqual(self.hs.frag_get(self.run_no, 1, 3, c), v)
        # overwrite
        self.hs.frag_put(self.run_no, 1, 3, 0, b"new")
        self.assertEqual(self.hs.frag_get(self.run_no, 1, 3, 0), b"new")
        # field extremes of the default layout run:u32,event:u64|detector:u16,component:u16
        self.hs.frag_put(self.run_no, (1 << 64) - 1, 65535, 65535, b"max")
        self.assertEqual(self.hs.frag_get(self.run_no, (1 << 64) - 1, 65535, 65535), b"max")
        self.hs.frag_put((1 << 32) - 1, self.run_no, 0, 0, b"maxrun")
        self.assertEqual(self.hs.frag_get((1 << 32) - 1, self.run_no, 0, 0), b"maxrun")

    def test_frag_get_missing_is_none(self):
        self.assertIsNone(self.hs.frag_get(self.run_no, 99, 0, 0))
        self.hs.frag_put(self.run_no, 99, 0, 0, b"x")
        self.assertIsNone(self.hs.frag_get(self.run_no, 99, 0, 1))

    def test_durability_option(self):
        self.hs.frag_put(self.run_no, 1, 0, 0, b"m", durability="memory")
        self.hs.frag_put(self.run_no, 1, 1, 0, b"p", durability="persisted")
        self.hs.event_seal(self.run_no, 1, durability="persisted")
        ev = self.hs.event_next(lease_ms=10000)
        self.assertEqual(ev.fragments, [(0, 0, b"m"), (1, 0, b"p")])
        self.hs.event_ack(ev.token, remove=False, durability="memory")
        with self.assertRaises(ResponseError) as cm:
            self.hs.execute("FRAG.PUT", self.run_no, 2, 0, 0, b"x", "DURABILITY", "bogus")
        self.assertNotIsInstance(cm.exception, HotstoreError)
        with self.assertRaises(ValueError):
            self.hs.frag_put(self.run_no, 2, 0, 0, b"x", durability="bogus")

    def test_event_get_in_key_order(self):
        order = [(3, 1), (0, 2), (3, 0), (0, 0), (1, 65535), (256, 0)]
        for d, c in order:
            self.hs.frag_put(self.run_no, 5, d, c, b"%d/%d" % (d, c))
        self.hs.frag_put(self.run_no, 4, 0, 0, b"other event")
        self.hs.frag_put(self.run_no, 6, 0, 0, b"other event")
        got = self.hs.event_get(self.run_no, 5)
        self.assertEqual(got, [(d, c, b"%d/%d" % (d, c)) for d, c in sorted(order)])
        self.assertEqual(got[0].detector, 0)
        self.assertEqual(got[0].value, b"0/0")

    def test_event_get_missing_is_empty(self):
        self.assertEqual(self.hs.event_get(self.run_no, 12345), [])

    def test_frag_put_many_pipeline(self):
        frags = [(self.run_no, e, d, 0, b"v-%d-%d" % (e, d)) for e in range(50) for d in range(10)]
        self.assertEqual(self.hs.frag_put_many(frags), [None] * 500)
        for e in (0, 17, 49):
            self.assertEqual(
                self.hs.event_get(self.run_no, e),
                [(d, 0, b"v-%d-%d" % (e, d)) for d in range(10)],
            )
        self.assertEqual(self.hs.frag_put_many([]), [])

    def test_frag_put_many_reports_the_failed_fragment(self):
        frags = [
            (self.run_no, 1, 0, 0, b"a"),
            (self.run_no, 1, 70000, 0, b"detector too wide"),
            (self.run_no, 1, 1, 0, b"b"),
        ]
        with self.assertRaises(ResponseError) as cm:
            self.hs.frag_put_many(frags)
        self.assertEqual(cm.exception.index, 1)
        self.assertEqual(self.hs.frag_get(self.run_no, 1, 1, 0), b"b", "later fragments still stored")
        res = self.hs.frag_put_many(frags, raise_on_error=False)
        self.assertIsNone(res[0])
        self.assertIsInstance(res[1], ResponseError)
        self.assertIsNone(res[2])

    def test_full_cycle_remove(self):
        frags = self.put_event(42)
        before = self.hs.store_stats()
        ev = self.hs.event_next(lease_ms=10000)
        self.assertIsInstance(ev, ClaimedEvent)
        self.assertEqual((ev.run, ev.event), (self.run_no, 42))
        self.assertFalse(ev.incomplete)
        self.assertEqual(ev.fragments, frags)
        self.assertRegex(ev.token, r"^[0-9a-f]+:[0-9]+$")
        self.assertEqual(self.hs.event_range(self.run_no, 42, 43)[0].state, "claimed")
        self.assertIsNone(self.hs.event_next(lease_ms=10000), "a claimed event is not offered twice")
        self.hs.event_ack(ev.token, remove=True)
        self.assertEqual(self.hs.event_get(self.run_no, 42), [])
        self.assertIsNone(self.hs.frag_get(self.run_no, 42, 0, 0))
        self.assertEqual(self.hs.event_range(self.run_no, 0, 100), [])
        self.assertIsNone(self.hs.event_next(lease_ms=10000))
        with self.assertRaises(LateFragmentError):
            self.hs.frag_put(self.run_no, 42, 7, 0, b"late")
        self.assertIsNone(self.hs.frag_get(self.run_no, 42, 7, 0))
        after = self.hs.store_stats()
        self.assertGreaterEqual(after["late_fragments"], before["late_fragments"] + 1)
        self.assertGreaterEqual(after["events_removed"], before["events_removed"] + 1)

    def test_ack_keep(self):
        frags = self.put_event(7)
        before = self.hs.store_stats()
        ev = self.hs.event_next(lease_ms=10000)
        self.assertEqual(ev.event, 7)
        self.hs.event_ack(ev.token, remove=False)
        self.assertEqual(self.hs.event_get(self.run_no, 7), frags, "KEEP keeps the fragments")
        [info] = self.hs.event_range(self.run_no, 0, 100)
        self.assertEqual(info.state, "kept")
        self.assertIsNone(self.hs.event_next(lease_ms=10000), "a kept event is not offered again")
        with self.assertRaises(LateFragmentError):
            self.hs.frag_put(self.run_no, 7, 9, 0, b"late")
        with self.assertRaises(AlreadyAckedError):
            self.hs.event_seal(self.run_no, 7)
        after = self.hs.store_stats()
        self.assertGreaterEqual(after["events_kept_total"], before["events_kept_total"] + 1)
        self.assertGreaterEqual(after["events_kept"], 1)

    def test_double_ack(self):
        self.put_event(1)
        ev = self.hs.event_next(lease_ms=10000)
        self.hs.event_ack(ev.token)
        # A retried ack (its reply lost) is told the event is done, not that it comes back.
        with self.assertRaises(AlreadyAckedError):
            self.hs.event_ack(ev.token)

    def test_batches_of_claims_and_acks(self):
        for e in range(1, 6):
            self.put_event(e, n=1)
        first = self.hs.event_next_many(3, lease_ms=10000)
        self.assertEqual([c.event for c in first], [1, 2, 3])
        self.assertEqual(first[0].fragments[0].value, b"r%d e1 d0 " % self.run_no)
        errors, rest = self.hs.event_ack_next([c.token for c in first], 10, lease_ms=10000)
        self.assertEqual(errors, [None, None, None])
        self.assertEqual([c.event for c in rest], [4, 5])
        # A token acknowledged twice in one batch: the second is told it is done.
        results = self.hs.event_ack_many([rest[0].token, rest[1].token, rest[0].token])
        self.assertEqual(results[:2], [None, None])
        self.assertIsInstance(results[2], AlreadyAckedError)
        self.assertEqual(self.hs.event_next_many(5), [])
        errors, none = self.hs.event_ack_next([], 5)
        self.assertEqual((errors, none), ([], []))

    def test_consumer_groups(self):
        for e in range(1, 4):
            self.put_event(e, n=1)
        try:
            self.hs.group_create("filter")
            self.hs.group_create("sampler", required=False)
            with self.assertRaises(NoGroupError):
                self.hs.event_next(group="nope")
            with self.assertRaises(ResponseError):
                self.hs.event_next()  # a store with groups: claims name one
            got = self.hs.event_next_many(10, lease_ms=10000, group="filter", consumer="f1")
            self.assertEqual([c.event for c in got], [1, 2, 3])
            sampled = self.hs.event_next(lease_ms=10000, group="sampler")
            self.assertEqual(sampled.event, 1)
            pending = self.hs.event_pending(group="filter")
            self.assertEqual([p["consumer"] for p in pending], ["f1"] * 3)
            self.assertEqual(pending[0]["deliveries"], 1)
            groups = {g["name"]: g for g in self.hs.groups()}
            self.assertEqual((groups["filter"]["pending"], groups["filter"]["required"]), (3, 1))
            self.assertEqual((groups["sampler"]["lag"], groups["sampler"]["required"]), (2, 0))
            self.assertEqual(self.hs.consumers("filter")[0]["name"], "f1")
            errors, more = self.hs.event_ack_next(
                [c.token for c in got], 10, group="filter")
            self.assertEqual((errors, more), ([None] * 3, []))
            # The sampler is optional: filter's acknowledgement removed the events.
            self.assertEqual(self.hs.event_get(self.run_no, 1), [])
            with self.assertRaises(AlreadyAckedError):
                self.hs.event_ack(sampled.token)
        finally:
            for g in ("filter", "sampler"):
                try:
                    self.hs.group_destroy(g)
                except NoGroupError:
                    pass
        with self.assertRaises(NoGroupError):
            self.hs.group_destroy("filter")

    def test_event_range_states_fields_and_limit(self):
        self.put_event(2, n=3)  # ready
        self.put_event(3)  # will be claimed
        self.put_event(4)  # will be kept
        ev = self.hs.event_next(lease_ms=10000)
        self.assertEqual(ev.event, 2)
        self.hs.event_release(ev.token)
        evs = [self.hs.event_next(lease_ms=10000) for _ in range(3)]
        self.assertEqual([e.event for e in evs], [2, 3, 4])
        self.hs.event_release(evs[0].token)
        self.hs.event_ack(evs[2].token, remove=False)
        self.put_event(1, seal=False)  # open, if the store waits for the seal
        rows = self.hs.event_range(self.run_no, 0, 100)
        first = "open" if self.OPEN_UNTIL_SEALED else "ready"
        self.assertEqual([(r.event, r.state) for r in rows],
                         [(1, first), (2, "ready"), (3, "claimed"), (4, "kept")])
        for r in rows:
            self.assertIsInstance(r, EventInfo)
            self.assertFalse(r.incomplete)
        self.assertEqual(rows[1].fragments, 3)
        self.assertEqual(rows[0].fragments, 2)
        self.assertEqual(rows[0].bytes, sum(len(v) for _, _, v in self.hs.event_get(self.run_no, 1)))
        self.assertEqual([r.event for r in self.hs.event_range(self.run_no, 0, 100, limit=2)], [1, 2])
        self.assertEqual([r.event for r in self.hs.event_range(self.run_no, 2, 4)], [2, 3])
        self.assertEqual(self.hs.event_range(self.run_no, 5, 100), [])
        self.assertEqual(self.hs.event_range(self.run_no + 1, 0, 100), [])
        self.hs.event_ack(evs[1].token)
        # doc example: two fragments "detector zero"/"detector one" are 25 bytes
        self.hs.frag_put(self.run_no, 42, 0, 0, b"detector zero")
        self.hs.frag_put(self.run_no, 42, 1, 0, b"detector one")
        self.hs.event_seal(self.run_no, 42)
        [row] = self.hs.event_range(self.run_no, 42, 43)
        self.assertEqual((row.event, row.state, row.fragments, row.bytes, row.incomplete),
                         (42, "ready", 2, 25, False))

    def test_event_next_empty(self):
        self.assertIsNone(self.hs.event_next(lease_ms=1000))
        t0 = time.monotonic()
        self.assertIsNone(self.hs.event_next(lease_ms=1000, block_ms=300))
        waited = time.monotonic() - t0
        self.assertGreaterEqual(waited, 0.25)
        self.assertLess(waited, 5)
        if self.OPEN_UNTIL_SEALED:
            self.put_event(1, seal=False)
            self.assertIsNone(self.hs.event_next(lease_ms=1000), "an open event is not READY")

    def test_event_next_block_wakes_up_and_does_not_block_others(self):
        other = HotstoreClient(HOST, PORT, socket_timeout=20)
        try:
            result = {}

            def consumer():
                t0 = time.monotonic()
                result["ev"] = self.hs.event_next(lease_ms=10000, block_ms=0)
                result["t"] = time.monotonic() - t0

            t = threading.Thread(target=consumer)
            t.start()
            time.sleep(0.3)
            t0 = time.monotonic()
            self.assertTrue(other.ping())
            self.assertLess(time.monotonic() - t0, 1.0, "a blocked EVENT.NEXT stalls other clients")
            self.assertTrue(t.is_alive(), "EVENT.NEXT BLOCK 0 returned before any event was READY")
            other.frag_put(self.run_no, 1, 0, 0, b"wake up")
            other.event_seal(self.run_no, 1)
            t.join(15)
            self.assertFalse(t.is_alive(), "EVENT.NEXT BLOCK 0 did not wake up on seal")
            self.assertEqual(result["ev"].event, 1)
            self.assertGreaterEqual(result["t"], 0.25)
            self.hs.event_ack(result["ev"].token)
        finally:
            other.close()

    def test_release_keeps_place(self):
        self.put_event(1)
        self.put_event(2)
        ev1 = self.hs.event_next(lease_ms=10000)
        self.assertEqual(ev1.event, 1)
        self.hs.event_release(ev1.token)
        self.assertEqual(self.hs.event_range(self.run_no, 1, 2)[0].state, "ready")
        again = self.hs.event_next(lease_ms=10000)
        self.assertEqual(again.event, 1, "a released event keeps its place")
        self.assertNotEqual(again.token, ev1.token)
        with self.assertRaises(ClaimLostError):
            self.hs.event_ack(ev1.token)
        with self.assertRaises(ClaimLostError):
            self.hs.event_release(ev1.token)
        self.hs.event_ack(again.token)
        ev2 = self.hs.event_next(lease_ms=10000)
        self.assertEqual(ev2.event, 2)
        self.hs.event_ack(ev2.token)

    def test_lease_expiry(self):
        self.put_event(1)
        before = self.hs.store_stats()
        ev = self.hs.event_next(lease_ms=200)
        self.assertEqual(ev.event, 1)
        time.sleep(0.7)
        with self.assertRaises(ClaimLostError):
            self.hs.event_ack(ev.token)
        again = self.hs.event_next(lease_ms=10000)
        self.assertIsNotNone(again, "an expired claim goes back to READY")
        self.assertEqual(again.event, 1)
        self.hs.event_ack(again.token)
        self.assertGreaterEqual(self.hs.store_stats()["leases_expired"], before["leases_expired"] + 1)

    def test_ack_from_another_connection(self):
        frags = self.put_event(3)
        ev = self.hs.event_next(lease_ms=10000)
        with HotstoreClient(HOST, PORT) as other:
            other.event_ack(ev.token, remove=False)
        self.assertEqual(self.hs.event_range(self.run_no, 3, 4)[0].state, "kept")
        self.assertEqual(self.hs.event_get(self.run_no, 3), frags)

    def test_claims_released_on_disconnect(self):
        frags = self.put_event(8)
        a = HotstoreClient(HOST, PORT, client_name="consumer-a")
        ev_a = a.event_next(lease_ms=600_000)
        self.assertEqual((ev_a.run, ev_a.event), (self.run_no, 8))
        self.assertIsNone(self.hs.event_next(lease_ms=10000), "A holds the claim")
        a.close()  # long lease, but the connection is gone
        t0 = time.monotonic()
        ev_b = self.hs.event_next(lease_ms=10000, block_ms=5000)
        self.assertIsNotNone(ev_b, "the claim of a closed connection did not go back to READY")
        self.assertLess(time.monotonic() - t0, 5)
        self.assertEqual((ev_b.run, ev_b.event), (self.run_no, 8))
        self.assertEqual(ev_b.fragments, frags)
        self.assertNotEqual(ev_b.token, ev_a.token)
        with self.assertRaises(ClaimLostError):
            self.hs.event_ack(ev_a.token)
        self.hs.event_ack(ev_b.token)

    def test_claims_released_on_abrupt_disconnect(self):
        self.put_event(9)
        raw = Raw()
        reply = raw.cmd("EVENT.NEXT", "LEASE", 600_000, "CONSUMER", "raw-consumer")
        self.assertEqual(reply[1], [self.run_no, 9])
        raw.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        raw.close()  # RST, not FIN
        ev = self.hs.event_next(lease_ms=10000, block_ms=5000)
        self.assertIsNotNone(ev)
        self.assertEqual(ev.event, 9)
        self.hs.event_ack(ev.token)

    def test_seal_without_fragments(self):
        with self.assertRaises(NoEventError):
            self.hs.event_seal(self.run_no, 555)
        self.put_event(1)
        self.hs.event_seal(self.run_no, 1)  # sealing twice is a no-op
        ev = self.hs.event_next(lease_ms=10000)
        self.assertEqual(ev.event, 1)
        self.assertIsNone(self.hs.event_next(lease_ms=10000))
        self.hs.event_ack(ev.token)

    def test_consumer_option(self):
        self.put_event(1)
        ev = self.hs.event_next(lease_ms=10000, block_ms=100, consumer="farm-node-7")
        self.assertEqual(ev.event, 1)
        self.hs.event_ack(ev.token)

    def test_bad_arguments_are_err(self):
        r = self.run_no
        bad = [
            ("FRAG.PUT", "abc", 1, 0, 0, b"v"),
            ("FRAG.PUT", 1 << 32, 1, 0, 0, b"v"),
            ("FRAG.PUT", r, 1 << 64, 0, 0, b"v"),
            ("FRAG.PUT", r, 1, 1 << 16, 0, b"v"),
            ("FRAG.PUT", r, 1, 0, -1, b"v"),
            ("FRAG.PUT", r, 1, 0, 0),
            ("FRAG.GET", r, 1, 0),
            ("EVENT.GET", r),
            ("EVENT.SEAL", r, "x"),
            ("EVENT.NEXT", "LEASE", "soon"),
            ("EVENT.NEXT", "BOGUS", 1),
            ("EVENT.ACK", "not-a-token", "REMOVE"),
            ("EVENT.ACK", "00000001000000000000002a:1", "MAYBE"),
            ("EVENT.RANGE", r, 0),
            ("EVENT.RANGE", r, 0, 10, "LIMIT", "x"),
        ]
        for args in bad:
            with self.assertRaises(ResponseError, msg=repr(args)) as cm:
                self.hs.execute(*args)
            self.assertNotIsInstance(cm.exception, HotstoreError, repr(args))
        self.assertTrue(self.hs.ping())
        self.assertEqual(self.hs.event_range(r, 0, 1 << 63), [], "nothing was stored")

    def test_store_stats(self):
        s = self.hs.store_stats()
        for name in STATS_NAMES:
            self.assertIn(name, s)
        for name in STATS_NAMES[:-2]:
            self.assertIsInstance(s[name], int, name)
            self.assertGreaterEqual(s[name], 0, name)
        self.hs.frag_put(self.run_no, 1, 0, 0, b"x" * 1000)
        self.hs.frag_put(self.run_no, 2, 0, 0, b"x")
        self.hs.event_seal(self.run_no, 2)
        s2 = self.hs.store_stats()
        self.assertGreaterEqual(s2["puts"], s["puts"] + 2)
        self.assertGreaterEqual(s2["entries"], s["entries"] + 2)
        self.assertGreater(s2["live_bytes"], s["live_bytes"])
        self.assertGreaterEqual(s2["events_open"] + s2["events_ready"], 2)
        self.assertGreaterEqual(s2["events_ready"], 1)
        raw = self.hs.redis.execute_command("STORE.STATS")
        self.assertIsInstance(raw, list, "RESP2: a flat array of name, value")
        self.assertEqual(len(raw) % 2, 0)
        self.assertEqual({k.decode() for k in raw[0::2]}, set(s))

    def test_resp3_client(self):
        with HotstoreClient(HOST, PORT, protocol=3) as h3:
            frags = [(d, 1, b"resp3-%d" % d) for d in range(3)]
            h3.frag_put_many([(self.run_no, 1, d, c, v) for d, c, v in frags])
            self.assertEqual(h3.event_get(self.run_no, 1), frags)
            self.assertEqual(h3.frag_get(self.run_no, 1, 2, 1), b"resp3-2")
            self.assertIsNone(h3.frag_get(self.run_no, 1, 9, 9))
            h3.event_seal(self.run_no, 1)
            [row] = h3.event_range(self.run_no, 0, 10)
            self.assertEqual(row.state, "ready")
            ev = h3.event_next(lease_ms=10000, block_ms=1000)
            self.assertEqual((ev.run, ev.event, ev.incomplete, ev.fragments),
                             (self.run_no, 1, False, frags))
            h3.event_ack(ev.token)
            with self.assertRaises(LateFragmentError):
                h3.frag_put(self.run_no, 1, 0, 0, b"late")
            self.assertIsInstance(h3.store_stats()["entries"], int)


# --------------------------------------------------------------------------------------------
# The wire: malformed input, inline commands, pipelining by hand
# --------------------------------------------------------------------------------------------


class T5Wire(unittest.TestCase):
    def assert_still_served(self):
        c = client()
        try:
            self.assertTrue(c.ping())
        finally:
            c.close()

    def assert_protocol_error_and_close(self, garbage):
        raw = Raw()
        try:
            raw.send(garbage)
            data = raw.read_until_eof()
        finally:
            raw.close()
        self.assertTrue(data.startswith(b"-ERR Protocol error"), "%r -> %r" % (garbage, data))
        self.assertTrue(data.endswith(b"\r\n"), data)
        self.assertEqual(data.count(b"\r\n"), 1, "one error line, then the connection closes: %r" % data)
        self.assert_still_served()

    def test_malformed_bulk_length(self):
        self.assert_protocol_error_and_close(b"*2\r\n$abc\r\n")

    def test_malformed_multibulk_length(self):
        self.assert_protocol_error_and_close(b"*x\r\n")

    def test_replies_before_the_error_are_sent(self):
        raw = Raw()
        try:
            raw.send(encode("PING") + b"*1\r\n$zz\r\n")
            data = raw.read_until_eof()
        finally:
            raw.close()
        self.assertTrue(data.startswith(b"+PONG\r\n-ERR Protocol error"), data)

    def test_inline_commands(self):
        raw = Raw()
        try:
            raw.send(b"PING\r\n")
            self.assertEqual(raw.reply(), "PONG")
            raw.send(b"SET inline:%s hello\r\nGET inline:%s\r\n" % (TAG.encode(), TAG.encode()))
            self.assertEqual(raw.reply(), "OK")
            self.assertEqual(raw.reply(), b"hello")
            raw.send(b"ECHO \"two words\"\n")
            self.assertEqual(raw.reply(), b"two words")
            raw.send(b"DEL inline:%s\r\n" % TAG.encode())
            self.assertEqual(raw.reply(), 1)
        finally:
            raw.close()

    def test_pipelined_and_split_writes(self):
        raw = Raw()
        try:
            k = "wire:%s" % TAG
            raw.send(encode("SET", k, "v1") + encode("GET", k) + encode("ECHO", "x") + encode("DEL", k))
            self.assertEqual([raw.reply() for _ in range(4)], ["OK", b"v1", b"x", 1])
            msg = encode("ECHO", "byte by byte")
            for i in range(len(msg)):
                raw.send(msg[i:i + 1])
                time.sleep(0.001)
            self.assertEqual(raw.reply(), b"byte by byte")
        finally:
            raw.close()

    def test_quit(self):
        raw = Raw()
        try:
            raw.send(encode("QUIT"))
            data = raw.read_until_eof()
        finally:
            raw.close()
        self.assertEqual(data, b"+OK\r\n")
        self.assert_still_served()


if __name__ == "__main__":
    unittest.main()
