"""The embedded binding (``import hotstore``, built by ``pip install ./python``): every call,
zero-copy where it is promised, bad input, a locked store, and a kill -9 of a writer.

Run: ``python3 -m pytest tests/python/test_embedded.py`` (scripts/test runs it after
installing the package). Stores live in /dev/shm where there is one. Nothing here depends on
timing: waits are bounded by events, and timeouts are only upper bounds.
"""

import gc
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading

import numpy as np
import pytest

import hotstore
from hotstore import errors

SHM = "/dev/shm" if os.path.isdir("/dev/shm") else None


@pytest.fixture
def path():
    d = tempfile.mkdtemp(prefix="hotstore-py-", dir=SHM)
    yield os.path.join(d, "store")
    # /dev/shm is memory: leave nothing there (values still mapped keep their pages until
    # they go, the names go now).
    gc.collect()
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def store(path):
    s = hotstore.open(path, segment_size=1 << 20)
    yield s
    if not s.closed:
        # A test may leave reservations; they go with their objects.
        gc.collect()
        s.close()


def addr(a):
    return np.asarray(a).__array_interface__["data"][0]


# ------------------------------------------------------------------------------------------
# put / get / remove / range
# ------------------------------------------------------------------------------------------


def test_put_get_every_buffer_kind(store):
    store.put(b"bytes", b"abc")
    store.put(b"bytearray", bytearray(b"def"))
    store.put(b"memoryview", memoryview(b"xghi")[1:])
    store.put("str-key", b"str keys are utf-8")
    arr = np.arange(1000, dtype=np.float64).reshape(10, 100)
    store.put(b"array", arr)
    assert bytes(store.get(b"bytes")) == b"abc"
    assert store.get_bytes(b"bytearray") == b"def"
    assert store.get(b"memoryview") == b"ghi"
    assert store.get("str-key").tobytes() == b"str keys are utf-8"
    back = np.frombuffer(store.get(b"array"), dtype=np.float64).reshape(10, 100)
    assert np.array_equal(back, arr)
    assert np.array_equal(store.get(b"array").array(np.float64, (10, 100)), arr)
    assert store.get(b"missing") is None
    assert store.get_bytes(b"missing") is None
    assert store.value_len(b"array") == arr.nbytes
    assert store.value_len(b"missing") is None
    assert b"bytes" in store and store.contains(b"bytes") and b"nope" not in store


def test_empty_value_and_overwrite(store):
    store.put(b"k", b"")
    assert len(store.get(b"k")) == 0 and bytes(store.get(b"k")) == b""
    store.put(b"k", b"second", durability="memory")
    assert store.get_bytes(b"k") == b"second"


def test_remove(store):
    store.put(b"k", b"v")
    assert store.remove(b"k") is True
    assert store.remove(b"k", durability=hotstore.MEMORY) is False
    assert store.get(b"k") is None


def test_get_many(store):
    for i in range(40):
        store.put(b"k%d" % i, b"v%d" % i * (i + 1))
    keys = [b"k%d" % i for i in range(40, -1, -1)] + ["k3", b"k3", bytearray(b"k7")]
    want = [store.get_bytes(k) for k in keys]
    assert want[0] is None and want[-1] == b"v7" * 8
    assert store.get_many(keys) == want
    assert store.get_many(iter(keys)) == want
    assert store.get_many([]) == []
    with pytest.raises(TypeError):
        store.get_many([b"k1", 5])
    with pytest.raises(TypeError, match="not one str key"):
        store.get_many("k1")


def test_get_into(store):
    a = np.arange(256, dtype=np.uint32)
    store.put(b"k", a)
    out = np.empty(256, dtype=np.uint32)
    assert store.get_into(b"k", out) == a.nbytes
    assert np.array_equal(out, a)
    assert store.get_into(b"missing", out) is None
    with pytest.raises(errors.InvalidArgument, match="same size"):
        store.get_into(b"k", np.empty(255, dtype=np.uint32))
    with pytest.raises(TypeError, match="writable"):
        store.get_into(b"k", b"\0" * a.nbytes)  # bytes are read-only


def test_range_and_keys(store):
    for i in range(10):
        store.put(b"r%02d" % i, b"v%d" % i)
    got = store.range(b"r03", b"r07")
    assert [k for k, _ in got] == [b"r03", b"r04", b"r05", b"r06"]
    assert [bytes(v) for _, v in got] == [b"v3", b"v4", b"v5", b"v6"]
    assert len(store.range(b"r", limit=4)) == 4
    assert [k for k, _ in store.range(b"r08")] == [b"r08", b"r09"]
    assert store.keys(b"r00", b"r02") == [(b"r00", 2), (b"r01", 2)]
    assert len(store.range()) == 10


def test_fragment_keys():
    k = hotstore.fragment_key(1, 42, 3, 7)
    assert len(k) == 16 and k[:12] == hotstore.event_id(1, 42)
    assert hotstore.parse_fragment_key(k) == (1, 42, 3, 7)
    assert hotstore.parse_fragment_key(b"short") is None


# ------------------------------------------------------------------------------------------
# zero copy and the lifetime of values
# ------------------------------------------------------------------------------------------


def test_get_is_zero_copy_and_read_only(store):
    store.put(b"k", np.ones(1 << 20, dtype=np.uint8))
    v1, v2 = store.get(b"k"), store.get(b"k")
    a1, a2 = np.frombuffer(v1, np.uint8), np.frombuffer(v2, np.uint8)
    # Two gets see the same bytes at the same address: the store's memory, not a copy.
    assert addr(a1) == addr(a2)
    assert not a1.flags.writeable and not a1.flags.owndata
    with pytest.raises(ValueError):
        a1[0] = 5
    with pytest.raises(ValueError):
        np.frombuffer(v1, np.uint8).setflags(write=True)
    with pytest.raises(TypeError, match="read-only"):
        store.get_into(b"k", v1)  # asks the value for a writable buffer
    m = memoryview(v1)
    assert m.readonly and m.nbytes == 1 << 20
    assert v1.exports >= 2
    del m, a1
    gc.collect()


def test_value_outlives_overwrite_remove_and_compaction(store):
    want = np.arange(100_000, dtype=np.int64)
    store.put(b"k", want)
    v = store.get(b"k")
    a = np.frombuffer(v, np.int64)
    store.put(b"k", b"overwritten")
    store.remove(b"k")
    for i in range(40):  # fill and drain segments so the first one would be recycled
        store.put(b"churn%d" % (i % 8), np.full(50_000, i, dtype=np.int64))
    for i in range(8):
        store.remove(b"churn%d" % i)
    store.compact()
    assert np.array_equal(a, want)
    del v
    assert np.array_equal(a, want)  # the array alone keeps the value


def test_value_outlives_close_and_keeps_the_lock(path):
    s = hotstore.open(path)
    s.put(b"k", b"held")
    v = s.get(b"k")
    s.close()
    assert bytes(v) == b"held"
    with pytest.raises(errors.StoreLocked):
        hotstore.open(path)
    del v
    gc.collect()
    with hotstore.open(path) as s2:
        assert s2.get_bytes(b"k") == b"held"


def test_reservation_is_zero_copy(store):
    with store.reserve(b"frame", 64 * 256 * 4) as r:
        a = r.array(np.float32, (64, 256))
        assert a.flags.writeable and not a.flags.owndata
        a[:] = 2.5
        reserved_at = addr(a)
    assert r.state == "committed"
    got = np.frombuffer(store.get(b"frame"), np.float32)
    # The committed value is where the array wrote it: no copy was made.
    assert addr(got) == reserved_at
    assert np.all(got == 2.5)
    # The array stays valid after the commit (its memory is held), read-only for new buffers.
    assert np.all(a == 2.5)
    assert memoryview(r).readonly  # a committed reservation exports read-only buffers
    with pytest.raises(TypeError, match="writable"):
        store.get_into(b"frame", r)


def test_reservation_fill_commit_abort(store):
    r = store.reserve(b"a", 8)
    assert len(r) == 8 and r.nbytes == 8 and r.state == "open"
    r.fill(np.arange(2, dtype=np.int32))
    r.commit(durability="memory")
    assert np.array_equal(np.frombuffer(store.get(b"a"), np.int32), [0, 1])
    with pytest.raises(errors.InvalidArgument, match="already"):
        r.commit()
    r2 = store.reserve(b"b", 8)
    r2.abort()
    r2.abort()  # idempotent
    assert r2.state == "aborted" and store.get(b"b") is None
    with pytest.raises(BufferError, match="aborted"):
        memoryview(r2)
    with pytest.raises(errors.InvalidArgument, match="no longer open"):
        r2.fill(b"12345678")


def test_reservation_wrong_size_or_dtype(store):
    r = store.reserve(b"a", 10)
    with pytest.raises(errors.InvalidArgument, match="whole number"):
        r.array(np.float32)  # 10 bytes are not float32 items
    with pytest.raises(errors.InvalidArgument, match="shape"):
        r.array(np.uint8, (3, 3))
    with pytest.raises(TypeError, match="shape"):
        r.array(np.uint8, "ten")
    with pytest.raises(TypeError):
        r.array("not a dtype")
    with pytest.raises(errors.InvalidArgument, match="same size"):
        r.fill(b"short")
    with pytest.raises(errors.InvalidArgument, match="same size"):
        r.fill(np.zeros(10, dtype=np.float64))  # 80 bytes, not 10
    r.abort()


def test_reservation_abort_refused_while_arrays_live(store):
    r = store.reserve(b"a", 16)
    a = r.array()
    with pytest.raises(BufferError, match="alive"):
        r.abort()
    del a
    gc.collect()
    r.abort()
    assert store.get(b"a") is None


def test_reservation_context_aborts_on_exception(store):
    with pytest.raises(RuntimeError):
        with store.reserve(b"a", 4) as r:
            r.fill(b"abcd")
            raise RuntimeError("producer failed")
    assert r.state == "aborted" and store.get(b"a") is None
    # With an array still alive, the abort waits for it to go; the store is usable after.
    with pytest.raises(RuntimeError):
        with store.reserve(b"b", 4) as r:
            a = r.array()
            raise RuntimeError("again")
    assert r.state == "open"
    del a, r
    gc.collect()
    store.put(b"c", b"after")
    assert store.get(b"b") is None and store.get_bytes(b"c") == b"after"


def test_write_on_a_thread_with_an_open_reservation_is_refused(store):
    r = store.reserve(b"a", 4)
    for call in (
        lambda: store.put(b"x", b"y"),
        lambda: store.remove(b"x"),
        lambda: store.reserve(b"x", 1),
        lambda: store.flush(),
    ):
        with pytest.raises(errors.ReservationOpen):
            call()
    with pytest.raises(errors.ReservationOpen):
        store.close()
    assert store.get(b"x") is None  # reads are fine
    r.fill(b"abcd")
    r.commit()
    store.put(b"x", b"y")


def test_reservation_committed_on_another_thread(store):
    r = store.reserve(b"a", 3)
    r.fill(b"abc")
    t = threading.Thread(target=r.commit)
    t.start()
    t.join()
    assert store.get_bytes(b"a") == b"abc"


# ------------------------------------------------------------------------------------------
# bad input
# ------------------------------------------------------------------------------------------


def test_wrong_types(store):
    with pytest.raises(TypeError, match="str"):
        store.put(b"k", "a str value")
    with pytest.raises(TypeError):
        store.put(b"k", 12)
    with pytest.raises(TypeError):
        store.put(b"k", None)
    with pytest.raises(TypeError):
        store.put(12, b"v")
    with pytest.raises(TypeError):
        store.get(None)
    with pytest.raises(TypeError, match="contiguous"):
        store.put(b"k", np.arange(100)[::2])
    with pytest.raises(TypeError):
        store.seal("1/2")
    with pytest.raises(OverflowError):
        store.reserve(b"k", -1)
    assert store.get(b"k") is None


def test_key_limits(store):
    with pytest.raises(errors.KeyTooLarge) as e:
        store.put(b"k" * (hotstore.MAX_KEY_LEN + 1), b"v")
    assert isinstance(e.value, ValueError) and "longer than the maximum" in str(e.value)
    store.put(b"k" * hotstore.MAX_KEY_LEN, b"v")  # the limit itself is fine
    with pytest.raises(errors.EmptyKey):
        store.put(b"", b"v")
    with pytest.raises(errors.KeyTooLarge):
        store.reserve(b"k" * (hotstore.MAX_KEY_LEN + 1), 1)
    with pytest.raises(errors.ValueTooLarge):
        store.reserve(b"k", hotstore.MAX_VALUE_LEN + 1)


def test_bad_options(path, store):
    with pytest.raises(errors.InvalidArgument, match="durability"):
        store.put(b"k", b"v", durability="sometimes")
    with pytest.raises(errors.InvalidArgument, match="lease"):
        store.next_event("c", lease=-1)
    with pytest.raises(errors.InvalidArgument, match="acknowledgement"):
        store.ack("00:1", how="discard")
    with pytest.raises(errors.InvalidArgument, match="claim token"):
        store.ack("not a token")
    with pytest.raises(errors.InvalidOption):
        hotstore.open(path + "-2", segment_size=1000)
    with pytest.raises(errors.InvalidLayout):
        hotstore.open(path + "-3", layout="nonsense(")
    with pytest.raises(errors.NoStoreDirectory):
        hotstore.open(path + "-4", create=False)
    with open(path + "-file", "w") as f:
        f.write("x")
    with pytest.raises(errors.NotADirectory):
        hotstore.open(path + "-file")


def test_closed_store(path):
    s = hotstore.open(path)
    s.put(b"k", b"v")
    r_claimless = s.get(b"k")
    s.close()
    s.close()  # idempotent
    assert s.closed and "closed" in repr(s)
    calls = [
        lambda: s.put(b"k", b"v"),
        lambda: s.get(b"k"),
        lambda: s.get_bytes(b"k"),
        lambda: s.remove(b"k"),
        lambda: s.contains(b"k"),
        lambda: s.range(),
        lambda: s.keys(),
        lambda: s.reserve(b"k", 1),
        lambda: s.stats(),
        lambda: s.flush(),
        lambda: s.seal((1, 1)),
        lambda: s.next_event("c"),
        lambda: s.set_event_policy(2),
        lambda: s.create_group("g"),
        lambda: s.groups(),
    ]
    for call in calls:
        with pytest.raises(errors.StoreClosed, match="closed"):
            call()
    assert bytes(r_claimless) == b"v"


def test_context_manager_closes(path):
    with hotstore.open(path) as s:
        s.put(b"k", b"v")
    assert s.closed
    with hotstore.open(path, create=False) as s:
        assert s.get_bytes(b"k") == b"v"


LOCK_HOLDER = """
import sys, hotstore
s = hotstore.open(sys.argv[1])
print("open", flush=True)
sys.stdin.readline()
s.close()
"""


def test_store_locked_by_another_process(path):
    hotstore.open(path).close()
    child = subprocess.Popen(
        [sys.executable, "-c", LOCK_HOLDER, path],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "open"
        with pytest.raises(errors.StoreLocked) as e:
            hotstore.open(path)
        assert "open in another process" in str(e.value)
        assert isinstance(e.value, errors.HotstoreError)
    finally:
        child.stdin.write("\n")
        child.stdin.close()
        assert child.wait(timeout=60) == 0
    hotstore.open(path).close()  # free again


# ------------------------------------------------------------------------------------------
# events
# ------------------------------------------------------------------------------------------


def frag(event, det, run=1):
    return hotstore.fragment_key(run, event, det, 0)


def test_event_policy_claim_iterate_ack(store):
    store.set_event_policy(expected_fragments=3)
    assert store.event_policy()["expected_fragments"] == 3
    store.set_event_policy(expected_fragments=2, run=9)
    assert store.event_policy(9)["expected_fragments"] == 2
    for d in range(3):
        store.put(frag(42, d), np.full(100, d, dtype=np.uint16))
    info = store.event_info((1, 42))
    assert info["state"] == "Ready" or info["state"].lower() == "ready", info
    assert info["fragments"] == 3
    assert [e["fragments"] for e in store.events(1)] == [3]
    with store.next_event("filter-1", lease=30) as c:
        assert c.event == (1, 42) and c.event_id == hotstore.event_id(1, 42)
        assert c.fragment_count == 3 and c.bytes == 600 and not c.incomplete
        assert 0 < c.lease_left <= 30 and c.held
        seen = []
        for key, value in c:  # in place, key order
            a = np.frombuffer(value, np.uint16)
            seen.append((hotstore.parse_fragment_key(key)[2], int(a[0])))
        assert seen == [(0, 0), (1, 1), (2, 2)]
        assert len(c.fragments()) == 3
        assert len(store.pending()) == 1
        c.ack(hotstore.REMOVE)
        assert not c.held
    assert store.get(frag(42, 0)) is None
    assert store.event_info((1, 42)) is None
    with pytest.raises(errors.LateFragment):
        store.put(frag(42, 3), b"late")
    with pytest.raises(errors.InvalidArgument, match="already"):
        c.ack()


def test_seal_keep_release_and_claim_lost(store):
    store.set_event_policy(expected_fragments=0)
    store.put(frag(1, 0), b"a")
    assert store.next_event("c") is None  # OPEN until sealed
    store.seal((1, 1))
    store.seal(hotstore.event_id(1, 1))  # twice: a no-op
    c = store.next_event("c", lease=30)
    token = c.token
    c.release()
    with pytest.raises(errors.ClaimLost):
        store.ack(token)
    c = store.next_event("c", lease=30)
    store.ack(c.token, hotstore.KEEP)
    assert store.get_bytes(frag(1, 0)) == b"a"  # kept
    assert store.next_event("c") is None
    with pytest.raises(errors.EventAcknowledged):
        store.ack(c.token)
    with pytest.raises(errors.NoSuchEvent):
        store.seal((1, 999))
    # A claim left by a with block is released: the event is offered again.
    store.put(frag(2, 0), b"b")
    store.seal((1, 2))
    with store.next_event("c") as c:
        pass
    c2 = store.next_event("c", timeout=5)
    assert c2 is not None and c2.event == (1, 2)
    store.release(c2.token)
    del c2
    assert store.event(((1, 2)))[0][0] == frag(2, 0)


def test_next_event_wait_releases_the_gil(store):
    store.set_event_policy(expected_fragments=1)
    got = []
    started = threading.Event()

    def consumer():
        started.set()
        # Waits without holding the GIL: the main thread's put below can run meanwhile.
        got.append(store.next_event("waiter", lease=30, timeout=120))

    t = threading.Thread(target=consumer)
    t.start()
    started.wait()
    store.put(frag(7, 0), b"x")
    t.join()
    assert got[0] is not None and got[0].event == (1, 7)
    got[0].ack()


def test_consumer_groups(store):
    store.set_event_policy(expected_fragments=1)
    store.create_group("farm", required=True)
    store.create_group("monitor", required=False)
    assert [g["name"] for g in store.groups()] == ["farm", "monitor"]
    store.put(frag(5, 0), b"x")
    m = store.next_event_in("monitor", "mon-1", lease=30)
    assert m is not None and m.event == (1, 5)
    m.ack(hotstore.REMOVE)  # a sampler's ack does not remove
    assert store.get(frag(5, 0)) is not None
    f = store.next_event_in("farm", "f-1", lease=30, timeout=1)
    assert len(store.pending(group="farm")) == 1
    assert [c["name"] for c in store.consumers("farm")] == ["f-1"]
    f.ack(hotstore.REMOVE)
    assert store.get(frag(5, 0)) is None
    with pytest.raises(errors.NoSuchGroup):
        store.next_event_in("nope", "c")
    with pytest.raises(errors.NoSuchGroup):
        store.consumers("nope")
    store.destroy_group("monitor")
    store.destroy_group("farm")
    assert store.groups() == []


def test_stats(store):
    store.put(b"k", b"v" * 100)
    st = store.stats()
    assert st["entries"] == 1 and st["puts"] >= 1 and st["live_bytes"] > 0
    assert st["tiers"][0]["domain"] in ("volatile", "block", "pmem")
    store.set_max_deliveries(3)
    store.track_events()
    assert "events" in store.stats()


# ------------------------------------------------------------------------------------------
# kill -9 of a writer
# ------------------------------------------------------------------------------------------

WRITER = """
import os, sys
import numpy as np
import hotstore
path, log = sys.argv[1], sys.argv[2]
s = hotstore.open(path, segment_size=1 << 20)
fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
i = 0
while True:
    key = b"k%08d" % i
    value = np.full(64 + i % 5000, i % 251, dtype=np.uint8)
    if i % 2:
        s.put(key, value)
    else:
        with s.reserve(key, value.nbytes) as r:
            r.array()[:] = value
    os.write(fd, b"%d\\n" % i)  # after the put returned: acknowledged
    i += 1
"""


def test_kill9_writer_loses_no_acknowledged_put(path):
    log = path + ".acks"
    child = subprocess.Popen([sys.executable, "-c", WRITER, path, log])
    try:
        # Kill it once it acknowledged enough puts (it writes faster than we poll).
        while True:
            if child.poll() is not None:
                pytest.fail("the writer exited on its own with %s" % child.returncode)
            if os.path.exists(log) and os.path.getsize(log) > 20_000:
                break
            threading.Event().wait(0.01)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    with open(log, "rb") as f:
        lines = f.read().split(b"\n")
    acked = [int(x) for x in lines[:-1]]  # the last line may be cut by the kill
    assert len(acked) > 1000 and acked == list(range(len(acked)))
    with hotstore.open(path, create=False) as s:
        for i in acked:
            v = s.get(b"k%08d" % i)
            assert v is not None, "acknowledged put %d lost" % i
            a = np.frombuffer(v, np.uint8)
            assert len(a) == 64 + i % 5000 and np.all(a == i % 251), i


# ------------------------------------------------------------------------------------------
# the package
# ------------------------------------------------------------------------------------------


def test_package_exports():
    from hotstore import client

    assert hotstore.Client is client.HotstoreClient
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
    try:
        import hotstore_client

        assert hotstore_client.HotstoreClient.__name__ == "HotstoreClient"
        assert callable(hotstore_client.map_error)
    finally:
        sys.path.pop(0)
    for name in hotstore.errors.__all__:
        assert issubclass(getattr(hotstore, name), hotstore.HotstoreError)
    assert issubclass(hotstore.StoreLocked, hotstore.HotstoreError)
    assert hotstore.Store.__doc__ and hotstore.Store.put.__doc__


def test_readme_python_example_runs(path):
    """README.md's Python example runs as written (its store path made a temporary one)."""
    readme = os.path.join(os.path.dirname(__file__), "..", "..", "README.md")
    with open(readme) as f:
        text = f.read()
    block = text.split("```python\n", 1)[1].split("```", 1)[0]
    assert "hotstore.open" in block
    code = block.replace('"/dev/shm/buffer"', repr(path))
    scope = {}
    exec(compile(code, "README.md", "exec"), scope)
    assert np.array_equal(scope["a"], np.arange(1024, dtype=np.uint16))
