#!/usr/bin/env python3
"""Proves a hotstore cluster works with unmodified cluster clients and with hotstore.ClusterClient:
redis-py's RedisCluster routes keys and events (tag form), a client that ignores MOVED writes
nothing on the wrong node, the DAQ flow across nodes consumes every event exactly once with
every fragment intact, consumer groups work per node, and (with a driver that can kill nodes)
losing a node stops only its slots and loses none of its acknowledged writes.

Run against a running cluster (``crates/hotstore-cli/tests/cluster_clients.rs`` starts one)::

    HOTSTORE_CLUSTER=127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003 \
    python3 -m pytest tests/python/test_cluster.py -v

The nodes must run with ``--expected-fragments 3`` (an event is READY with 3 fragments, or
sealed) and no incomplete timeout. ``test_node_loss*`` needs ``HOTSTORE_CONTROL`` (host:port
of the driver, which kills and restarts nodes on request: lines ``kill I`` and ``restart I``,
answered ``ok`` or ``err ...``), ``HOTSTORE_BIN`` (the hotstore binary) and nodes with
``--durability persisted``; it is skipped without them. The other tests expect that no other
client claims events on the cluster while they run.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import socket
import struct
import subprocess
import sys
import threading
import time
import zlib
from typing import Dict, List, Set, Tuple

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

redis = pytest.importorskip("redis")
from redis.backoff import NoBackoff  # noqa: E402
from redis.cluster import ClusterNode, RedisCluster  # noqa: E402
from redis.exceptions import ConnectionError as RedisConnectionError  # noqa: E402
from redis.exceptions import ResponseError  # noqa: E402
from redis.retry import Retry  # noqa: E402

import hotstore  # noqa: E402  (the network part needs no native extension)
from hotstore.client import ClaimLostError  # noqa: E402
from hotstore.cluster import (  # noqa: E402
    ClusterClaim,
    ClusterClient,
    ClusterCommandError,
    NodeUnavailableError,
    event_tag,
)

if not os.environ.get("HOTSTORE_CLUSTER"):
    pytest.skip(
        "HOTSTORE_CLUSTER is not set: start a cluster (hotstore serve --cluster) and give its "
        "nodes as host:port,host:port,...",
        allow_module_level=True,
    )
NODES: List[str] = os.environ["HOTSTORE_CLUSTER"].split(",")
CONTROL = os.environ.get("HOTSTORE_CONTROL")
BIN = os.environ.get("HOTSTORE_BIN")
# Fragments that complete an event on these nodes (--expected-fragments).
EXPECTED = 3
# How long anything may take before a test calls it a hang (a busy machine is slow).
HANG_S = 120.0

# Runs of this process: every test uses its own run numbers, so tests never see each other's
# events.
_RUN_BASE = (os.getpid() % 10000) * 100 + random.randrange(100)
_runs = iter(range(_RUN_BASE, _RUN_BASE + 100))


def new_run() -> int:
    return next(_runs)


def split(addr: str) -> Tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host, int(port)


def rc(**kw) -> RedisCluster:
    """An unmodified redis-py cluster client."""
    host, port = split(NODES[0])
    return RedisCluster(host=host, port=port, **kw)


def node_redis(addr: str) -> "redis.Redis":
    host, port = split(addr)
    return redis.Redis(host=host, port=port, single_connection_client=True)


def payload(run: int, event: int, detector: int, rng: random.Random) -> bytes:
    """A fragment value that says whose it is and carries its own checksum (as minidaq's)."""
    body = rng.randbytes(rng.randrange(16, 4096))
    head = struct.pack("<QQII", run, event, detector, len(body))
    return head + body + struct.pack("<I", zlib.crc32(head + body))


def check_payload(value: bytes, run: int, event: int, detector: int) -> None:
    head, rest = value[:24], value[24:]
    r, e, d, n = struct.unpack("<QQII", head)
    assert (r, e, d) == (run, event, detector), f"fragment of {(r, e, d)} in {(run, event, detector)}"
    assert len(rest) == n + 4, f"fragment {(run, event, detector)} has {len(rest)} bytes, not {n + 4}"
    (crc,) = struct.unpack("<I", rest[n:])
    assert crc == zlib.crc32(head + rest[:n]), f"fragment {(run, event, detector)} is damaged"


def wait_for(what: str, cond, timeout: float = HANG_S, every: float = 0.05):
    """Polls ``cond`` until it returns a true value (a hang guard, not a synchronisation)."""
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)


@pytest.fixture
def hc():
    c = ClusterClient(startup_nodes=NODES)
    yield c
    c.close()


# --------------------------------------------------------------------------------------------
# Routing with unmodified clients
# --------------------------------------------------------------------------------------------


def test_redis_cluster_routes_keys_and_fragments_to_every_node():
    r = rc()
    try:
        tag = "k%d" % new_run()
        keys = ["%s:%d" % (tag, i) for i in range(60)]
        for k in keys:
            assert r.set(k, k.encode() * 3)
        for k in keys:
            assert r.get(k) == k.encode() * 3
        owners = {"%s:%s" % (n.host, n.port) for n in (r.get_node_from_key(k) for k in keys)}
        assert owners == set(NODES), f"60 keys landed on {owners} only"
        # Fragments in tag form: FRAG.PUT run:event detector component value.
        run = new_run()
        nodes_of_events = set()
        for event in range(30):
            t = "%d:%d" % (run, event)
            for d in range(EXPECTED - 1):  # not complete: nobody is offered these events
                assert r.execute_command("FRAG.PUT", t, d, 0, b"v%d/%d" % (event, d)) == b"OK"
            n = r.get_node_from_key(t)
            nodes_of_events.add("%s:%s" % (n.host, n.port))
        assert nodes_of_events == set(NODES)
        for event in range(30):
            t = "%d:%d" % (run, event)
            assert r.execute_command("FRAG.GET", t, 1, 0) == b"v%d/1" % event
            frags = r.execute_command("EVENT.GET", t)
            assert [bytes(f[2]) for f in frags] == [b"v%d/%d" % (event, d) for d in range(2)]
        # Each event lives on its tag's node only.
        t = "%d:%d" % (run, 0)
        owner = r.get_node_from_key(t)
        for addr in NODES:
            got = node_redis(addr)
            try:
                if (got.connection_pool.connection_kwargs["port"]) == owner.port:
                    assert got.execute_command("FRAG.GET", t, 0, 0) == b"v0/0"
                else:
                    with pytest.raises(ResponseError):
                        got.execute_command("FRAG.GET", t, 0, 0)
            finally:
                got.close()
        r.delete(*keys[:1])
        assert r.get(keys[0]) is None
    finally:
        r.close()


def test_cluster_client_keys_and_events(hc):
    assert sorted(hc.nodes()) == sorted(NODES)
    run = new_run()
    for i in range(20):
        hc.set("c%d:%d" % (run, i), b"%d" % i)
    assert [hc.get("c%d:%d" % (run, i)) for i in range(20)] == [b"%d" % i for i in range(20)]
    assert hc.get("c%d:none" % run) is None
    assert hc.delete("c%d:0" % run) and not hc.delete("c%d:0" % run)
    hc.frag_put(run, 1, 0, 0, b"zero")
    hc.frag_put(run, 1, 1, 2, b"one", durability="memory")
    assert hc.frag_get(run, 1, 1, 2) == b"one"
    assert hc.frag_get(run, 1, 5, 5) is None
    assert hc.event_get(run, 1) == [(0, 0, b"zero"), (1, 2, b"one")]
    assert hc.event_get(run, 2) == []
    assert hc.node_of_event(run, 1) == hc.node_of(event_tag(run, 1))
    with pytest.raises(hotstore.client.NoEventError):
        hc.event_seal(run, 2)  # no fragments
    with pytest.raises(ValueError):
        hc.frag_put(run, 1, 0, 0, b"x", durability="disk")
    stats = hc.store_stats()
    assert set(stats) == set(NODES) and all("entries" in s for s in stats.values())
    assert sum(hc.dbsize().values()) >= 20


def test_a_client_ignoring_moved_writes_nothing_on_the_wrong_node(hc):
    run = new_run()
    key = "m%d" % run
    owner = hc.node_of(key)
    wrong = next(n for n in NODES if n != owner)
    tag = event_tag(run, 5)
    wrong_for_event = next(n for n in NODES if n != hc.node_of(tag))
    plain = node_redis(wrong)
    plain_ev = node_redis(wrong_for_event)
    try:
        before = plain.dbsize()
        with pytest.raises(ResponseError) as e:
            plain.set(key, b"x")
        assert isinstance(e.value, redis.exceptions.MovedError), repr(e.value)
        assert e.value.node_addr == split(owner), (e.value.node_addr, owner)
        with pytest.raises(ResponseError, match="MOVED|%s" % owner):
            plain.get(key)
        with pytest.raises(redis.exceptions.ClusterCrossSlotError):
            # Keys of two slots in one request: refused even where one of them is served.
            other = next(k for k in ("x%d" % i for i in range(100)) if hc.node_of(k) != wrong)
            mine = next(k for k in ("y%d" % i for i in range(100)) if hc.node_of(k) == wrong)
            plain.mset({other: b"1", mine: b"2"})
        ev_before = plain_ev.dbsize()
        with pytest.raises(redis.exceptions.MovedError):
            plain_ev.execute_command("FRAG.PUT", tag, 0, 0, b"lost")
        with pytest.raises(redis.exceptions.MovedError):
            plain_ev.execute_command("FRAG.PUT", run, 5, 0, 0, b"lost")  # the fields form too
        with pytest.raises(redis.exceptions.MovedError):
            plain_ev.execute_command("EVENT.SEAL", tag)
        assert plain.dbsize() == before
        assert plain_ev.dbsize() == ev_before
        rows = plain_ev.execute_command("EVENT.RANGE", run, 0, 100)
        assert not rows, f"the wrong node holds events of run {run}: {rows}"
        assert hc.get(key) is None and hc.event_get(run, 5) == []
        # A claim token of another node's event answers MOVED there too.
        hc.frag_put(run, 5, 0, 0, b"a")
        hc.event_seal(run, 5)
        owner_c = hc.client(hc.node_of_event(run, 5))
        try:
            claim = wait_for("the sealed event", lambda: owner_c.event_next(lease_ms=60000))
            assert claim.token.startswith("{%s}" % tag), claim.token
            with pytest.raises(redis.exceptions.MovedError):
                plain_ev.execute_command("EVENT.ACK", claim.token, "REMOVE")
            owner_c.event_ack(claim.token)
        finally:
            owner_c.close()
    finally:
        plain.close()
        plain_ev.close()


# --------------------------------------------------------------------------------------------
# The DAQ flow across the cluster
# --------------------------------------------------------------------------------------------


def _producer(run: int, events: List[int], seed: int, out) -> None:
    """One producer process: puts the fragments of its events, sealing every 5th early."""
    rng = random.Random(seed)
    hc = ClusterClient(startup_nodes=NODES)
    n = 0
    try:
        for event in events:
            short = event % 5 == 0  # sealed with fewer fragments
            dets = list(range(EXPECTED - 1 if short else EXPECTED))
            rng.shuffle(dets)
            for d in dets:
                hc.frag_put(run, event, d, 0, payload(run, event, d, rng))
                n += 1
            if short:
                hc.event_seal(run, event)
        out.put(("ok", n))
    except BaseException as e:  # noqa: BLE001 - reported to the test
        out.put(("error", repr(e)))
    finally:
        hc.close()


def test_daq_flow_across_the_cluster(hc):
    run = new_run()
    n_events, n_producers = 600, 3
    ctx = multiprocessing.get_context("fork")  # before any thread of this test starts
    out = ctx.Queue()
    producers = [
        ctx.Process(
            target=_producer,
            args=(run, list(range(i, n_events, n_producers)), run * 10 + i, out),
            daemon=True,
        )
        for i in range(n_producers)
    ]
    for p in producers:
        p.start()
    seen: Dict[int, int] = {}
    nodes_of: Dict[int, str] = {}
    lock = threading.Lock()
    problems: List[str] = []
    done = threading.Event()

    def consume(name: str) -> None:
        with hc.consumer(consumer=name, block_ms=200, count=8, lease_ms=120000) as c:
            while not done.is_set():
                claims = c.next_many(32, timeout=0.2)
                for cl in claims:
                    try:
                        want = EXPECTED - 1 if cl.event % 5 == 0 else EXPECTED
                        assert cl.run == run, f"claimed an event of run {cl.run}"
                        assert len(cl.fragments) == want, (cl.event, len(cl.fragments))
                        for d, comp, v in cl.fragments:
                            assert comp == 0
                            check_payload(v, run, cl.event, d)
                        assert cl.node == hc.node_of_event(run, cl.event), (cl.node, cl.event)
                    except AssertionError as e:
                        problems.append(str(e))
                errors = c.ack_many(claims)
                with lock:
                    for cl, err in zip(claims, errors):
                        if err is not None:
                            problems.append(f"ack of {cl.event} on {cl.node}: {err!r}")
                        else:
                            seen[cl.event] = seen.get(cl.event, 0) + 1
                            nodes_of[cl.event] = cl.node
                if not c.nodes or c.down():
                    problems.append(f"nodes down: {c.down()}")

    consumers = [threading.Thread(target=consume, args=("c%d" % i,)) for i in range(2)]
    for t in consumers:
        t.start()
    try:
        results = [out.get(timeout=HANG_S) for _ in producers]
        assert all(r[0] == "ok" for r in results), results
        assert sum(r[1] for r in results) == sum(
            EXPECTED - 1 if e % 5 == 0 else EXPECTED for e in range(n_events)
        )
        wait_for("every event consumed", lambda: len(seen) >= n_events or problems)
    finally:
        done.set()
        for t in consumers:
            t.join(HANG_S)
        for p in producers:
            p.join(HANG_S)
            if p.is_alive():
                p.kill()
    assert not problems, problems[:10]
    assert sorted(seen) == list(range(n_events))
    twice = [e for e, n in seen.items() if n != 1]
    assert not twice, f"events consumed more than once: {twice[:20]}"
    assert set(nodes_of.values()) == set(NODES), "some node got no events"
    # Nothing is left claimed or READY, and the fragments were removed with the acks.
    for addr, s in hc.store_stats().items():
        assert s["events_claimed"] == 0 and s["events_ready"] == 0, (addr, s)
    assert hc.event_get(run, 1) == []


def test_consumer_groups_work_per_node_with_the_same_names(hc):
    run = new_run()
    hc.group_create("ga")
    try:
        hc.group_create("gb", required=False)
        hc.group_create("ga", exist_ok=True)
        with pytest.raises(ClusterCommandError) as e:
            hc.group_create("ga")
        assert set(e.value.errors) == set(NODES)
        groups = hc.groups()
        assert all({g["name"] for g in gs} == {"ga", "gb"} for gs in groups.values()), groups
        n_events = 30
        for event in range(n_events):
            hc.frag_put(run, event, 0, 0, b"e%d" % event)
            hc.event_seal(run, event)
        for group in ("gb", "ga"):  # the optional one first: ga's acks remove the events
            got: Dict[int, ClusterClaim] = {}
            with hc.consumer(group=group, consumer="x", block_ms=200) as c:
                while len(got) < n_events:
                    cl = c.next(timeout=HANG_S)
                    assert cl is not None, f"group {group}: {len(got)} of {n_events} events"
                    assert cl.event not in got, f"group {group} got {cl.event} twice"
                    got[cl.event] = cl
                assert c.ack_many(list(got.values())) == [None] * n_events
                assert c.next(timeout=0.3) is None
            assert {cl.node for cl in got.values()} == set(NODES)
        # Every required group (ga) acknowledged: the events are gone.
        wait_for("acked events removed", lambda: hc.event_get(run, 0) == [])
        # A consumer of a group that a node lacks reports that node and claims from the others.
        hc.group_destroy("gb")
        only = NODES[0]
        hc.client(only).group_create("gc")
        errors: List[Tuple[str, BaseException]] = []
        with hc.consumer(group="gc", block_ms=100, retry_s=0.1,
                         on_error=lambda n, e: errors.append((n, e))) as c:
            wait_for("the NOGROUP reports", lambda: {n for n, _ in errors} == set(NODES) - {only})
            assert all(isinstance(e, hotstore.client.NoGroupError) for _, e in errors), errors
            assert c.nodes[only].error is None
    finally:
        hc.group_destroy("gb", missing_ok=True)
        hc.group_destroy("gc", missing_ok=True)
        hc.group_destroy("ga", missing_ok=True)
    assert hc.groups() == {n: [] for n in NODES}


def test_claims_are_released_and_acked_on_their_node(hc):
    run = new_run()
    events = list(range(12))
    for e in events:
        hc.frag_put(run, e, 0, 0, b"r")
        hc.event_seal(run, e)
    with hc.consumer(block_ms=200, lease_ms=60000) as c:
        first = [wait_for("a claim", lambda: c.next(timeout=1.0)) for _ in events]
        assert sorted(cl.event for cl in first) == events
        c.release(first[0])
        again = wait_for("the released event", lambda: c.next(timeout=1.0))
        assert again.event == first[0].event and again.node == first[0].node
        with pytest.raises(ClaimLostError):
            c.ack(first[0])  # released: that claim is gone
        c.ack(again, remove=False)
        assert hc.event_get(run, again.event) == [(0, 0, b"r")]  # KEEP
        assert c.ack_many(first[1:]) == [None] * (len(events) - 1)
        bad = ClusterClaim("nonsense", run, 1, False, [], "127.0.0.1:1")
        with pytest.raises(ValueError):
            c.ack(bad)
    assert all(hc.event_get(run, e) == [] for e in events if e != again.event)


# --------------------------------------------------------------------------------------------
# Losing a node (needs the driver)
# --------------------------------------------------------------------------------------------


class Driver:
    """The test driver's control channel: it kills and restarts nodes on request."""

    def __init__(self, addr: str):
        host, port = split(addr)
        self.sock = socket.create_connection((host, port), timeout=HANG_S)
        self.file = self.sock.makefile("rw", encoding="utf-8", newline="\n")

    def do(self, request: str) -> None:
        self.file.write(request + "\n")
        self.file.flush()
        answer = self.file.readline().strip()
        assert answer == "ok", f"driver: {request}: {answer!r}"

    def close(self) -> None:
        self.file.close()
        self.sock.close()


def cluster_check() -> Tuple[int, str]:
    p = subprocess.run(
        [BIN, "cluster", "check", NODES[0]], capture_output=True, text=True, timeout=HANG_S
    )
    return p.returncode, p.stdout + p.stderr


@pytest.mark.skipif(not (CONTROL and BIN), reason="needs HOTSTORE_CONTROL and HOTSTORE_BIN")
def test_node_loss_stops_only_its_slots_and_loses_no_acknowledged_write():
    victim_index = 1
    victim = NODES[victim_index]
    driver = Driver(CONTROL)
    run = new_run()
    # Fewer retries than redis-py's default, so a write to the dead node fails soon.
    producers_hc = [
        ClusterClient(startup_nodes=NODES, retry=Retry(NoBackoff(), 1)) for _ in range(3)
    ]
    lock = threading.Lock()
    acked_keys: Dict[str, Dict[str, bytes]] = {n: {} for n in NODES}
    acked_frags: Dict[str, Dict[Tuple[int, int], bytes]] = {n: {} for n in NODES}
    sealed: Dict[int, str] = {}
    errors: List[Tuple[str, BaseException]] = []
    wrong_errors: List[str] = []
    killed = threading.Event()
    stop = threading.Event()

    def produce(i: int) -> None:
        try:
            produce_events(i)
        except BaseException as e:  # noqa: BLE001 - the test reports it
            with lock:
                wrong_errors.append(f"producer {i}: {e!r}")

    def produce_events(i: int) -> None:
        hc = producers_hc[i]
        rng = random.Random(run * 10 + i)
        event = i
        while not stop.is_set():
            node = hc.node_of_event(run, event)
            key = "loss:%d:%d" % (run, event)
            key_node = hc.node_of(key)
            value = payload(run, event, 99, rng)
            try:
                hc.set(key, value)
                with lock:
                    acked_keys[key_node][key] = value
            except (NodeUnavailableError, RedisConnectionError) as e:
                with lock:
                    errors.append((key_node, e))
                    if key_node != victim or not killed.is_set():
                        wrong_errors.append(f"SET {key} on {key_node}: {e!r}")
            try:
                for d in range(EXPECTED - 1):  # not complete: READY when sealed
                    v = payload(run, event, d, rng)
                    hc.frag_put(run, event, d, 0, v)
                    with lock:
                        acked_frags[node][(event, d)] = v
                hc.event_seal(run, event)
                with lock:
                    sealed[event] = node
            except (NodeUnavailableError, RedisConnectionError) as e:
                with lock:
                    errors.append((node, e))
                    if node != victim or not killed.is_set():
                        wrong_errors.append(f"event {event} on {node}: {e!r}")
            event += len(producers_hc)

    def count(node: str) -> int:
        with lock:
            return len(acked_keys[node]) + len(acked_frags[node])

    # A consumer runs throughout and keeps the fragments (KEEP), so they can be checked.
    consumed: Dict[int, int] = {}
    ack_failures: List[Tuple[int, BaseException]] = []
    reported: List[str] = []
    consumer_hc = ClusterClient(startup_nodes=NODES)
    # A short lease: claims the killed node held come back (READY) when it ends.
    consumer = consumer_hc.consumer(
        lease_ms=5000, block_ms=200, count=8, retry_s=0.2, on_error=lambda n, e: reported.append(n)
    )
    consuming = threading.Event()

    def consume() -> None:
        try:
            while not consuming.is_set():
                claims = consumer.next_many(32, timeout=0.2)
                for cl, err in zip(claims, consumer.ack_many(claims, remove=False)):
                    with lock:
                        if err is None:
                            consumed[cl.event] = consumed.get(cl.event, 0) + 1
                        else:
                            ack_failures.append((cl.event, err))
        except BaseException as e:  # noqa: BLE001 - the test reports it
            with lock:
                wrong_errors.append(f"consumer: {e!r}")

    threads = [threading.Thread(target=produce, args=(i,)) for i in range(len(producers_hc))]
    threads.append(threading.Thread(target=consume))
    for t in threads:
        t.start()
    try:
        def failed() -> bool:
            with lock:
                return bool(wrong_errors)

        wait_for(
            "writes on every node",
            lambda: failed() or all(count(n) >= 30 for n in NODES),
        )
        assert not failed(), wrong_errors[:10]
        with lock:
            before_kill = {n: (dict(acked_keys[n]), dict(acked_frags[n])) for n in NODES}
        killed.set()  # errors of the victim are expected from now on
        driver.do("kill %d" % victim_index)
        after = {n: count(n) for n in NODES}
        # The producers keep writing to the other nodes, and see the victim's slots fail.
        wait_for(
            "writes to the surviving nodes and errors from the dead one",
            lambda: failed()
            or (
                all(count(n) >= after[n] + 30 for n in NODES if n != victim)
                and any(node == victim for node, _ in errors)
            ),
        )
        wait_for("the consumer reporting the dead node", lambda: victim in reported)
        assert consumer.nodes[victim].up is False
        stop.set()
        for t in threads[:-1]:
            t.join(HANG_S)
        with lock:
            assert not wrong_errors, wrong_errors[:10]
            victim_errors = [e for n, e in errors if n == victim]
        assert victim_errors and all(isinstance(e, NodeUnavailableError) for e in victim_errors)
        assert all(e.node == victim for e in victim_errors), {e.node for e in victim_errors}
        assert "does not answer" in str(victim_errors[0])
        # Every write acknowledged on the surviving nodes is readable, byte for byte.
        check = ClusterClient(startup_nodes=[n for n in NODES if n != victim])
        for n in NODES:
            if n == victim:
                continue
            for k, v in acked_keys[n].items():
                assert check.get(k) == v, f"acked key {k} on {n} lost"
            for (e, d), v in acked_frags[n].items():
                assert check.frag_get(run, e, d, 0) == v, f"acked fragment {(e, d)} on {n} lost"
        code, text = cluster_check()
        assert code == 1 and victim in text, text
        # The node comes back on its store, with everything it acknowledged.
        driver.do("restart %d" % victim_index)
        code, text = cluster_check()
        assert code == 0, text
        wait_for("RedisCluster reaching the node again", lambda: _answers(check, acked_keys[victim]))
        keys, frags = before_kill[victim]
        assert keys and frags
        for k, v in acked_keys[victim].items():  # all of them: before the kill and after
            assert check.get(k) == v, f"key {k} acknowledged by {victim} before the kill is lost"
        for (e, d), v in acked_frags[victim].items():
            assert check.frag_get(run, e, d, 0) == v, f"fragment {(e, d)} of {victim} lost"
        # The consumer claims from it again: every sealed event is consumed, once. An event
        # whose ack failed (its node died) is claimed again, unless that ack took effect
        # before the node died (the reply was lost): then the node keeps it as acknowledged.
        def settled(e: int) -> bool:
            if e in consumed:
                return True
            with lock:
                failed = any(x == e for x, _ in ack_failures)
            return failed and _state(check, run, e) == "kept"

        # New events on the node that came back reach the consumer too.
        fresh = [e for e in range(10**6, 10**6 + 200) if check.node_of_event(run, e) == victim][:5]
        for e in fresh:
            check.frag_put(run, e, 0, 0, payload(run, e, 0, random.Random(e)))
            check.event_seal(run, e)
            sealed[e] = victim
        # Waited for too: the events whose ack failed. One sealed just as the node died can
        # be claimed before the kill while its producer's seal reply is lost, so it is not in
        # `sealed`; it is claimed again only once the node is back. Fix (found running the
        # suite beside a CPU-heavy load): checked at once after the wait for `sealed`, such an
        # event was not claimed again yet, and the test failed.
        def waited() -> List[int]:
            with lock:
                return list(sealed) + [e for e, _ in ack_failures]

        wait_for("every sealed event consumed", lambda: all(settled(e) for e in waited()))
        assert all(e in consumed for e in fresh), fresh
        assert consumer.nodes[victim].up is True
        assert all(settled(e) for e, _ in list(ack_failures)), ack_failures[:10]
        check.close()
    finally:
        stop.set()
        consuming.set()
        for t in threads:
            t.join(HANG_S)
        consumer.close()
        consumer_hc.close()
        for c in producers_hc:
            c.close()
        driver.close()
    twice = {e: n for e, n in consumed.items() if n > 1}
    assert not twice, f"events acknowledged twice: {twice}"


def _state(hc: ClusterClient, run: int, event: int) -> str:
    with hc.client(hc.node_of_event(run, event)) as c:
        rows = c.event_range(run, event, event + 1)
    return rows[0].state if rows else "none"


def _answers(check: ClusterClient, keys: Dict[str, bytes]) -> bool:
    try:
        k = next(iter(keys))
        return check.get(k) == keys[k]
    except (NodeUnavailableError, RedisConnectionError):
        return False
