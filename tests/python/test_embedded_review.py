"""The embedded binding's waits for an event (``Store.next_event`` / ``next_event_in`` with a
timeout) against ``close()`` and signals (found in review).

A wait held the engine for its whole length, and ``close()`` waits (without the GIL) until no
call holds it: a consumer waiting in ``next_event(timeout=600)`` kept ``close()`` waiting up
to ten minutes, uninterruptibly. A signal (Ctrl-C) was only handled once the wait ended. The
waits now go in slices of 100 ms: between them the store's closing is seen (the wait raises
StoreClosed, as any call after close()) and Python's signal handlers run.

Run: ``python3 -m pytest tests/python/test_embedded_review.py`` (needs the package:
``pip install ./python``). The deadlines below only detect a hang; the waits are far longer.
"""

import gc
import os
import shutil
import signal
import tempfile
import threading
import time

import pytest

import hotstore
from hotstore import errors

SHM = "/dev/shm" if os.path.isdir("/dev/shm") else None

# The consumer's wait: far longer than any deadline below, so that a wait that does not end
# early fails the test instead of ending by itself.
WAIT_S = 600.0
# How long close() or an interrupted wait may take before the test calls it a hang (a working
# one takes about a slice, 0.1 s; a busy machine is slow).
HANG_S = 60.0


@pytest.fixture
def path():
    d = tempfile.mkdtemp(prefix="hotstore-py-review-", dir=SHM)
    yield os.path.join(d, "store")
    gc.collect()
    shutil.rmtree(d, ignore_errors=True)


def frag(event, det, run=1):
    return hotstore.fragment_key(run, event, det, 0)


def wait_call(kind):
    """The blocking call of `kind` on store `s`, waiting WAIT_S (or `timeout`)."""
    if kind == "next_event":
        return lambda s, timeout=WAIT_S: s.next_event("c", lease=30, timeout=timeout)
    return lambda s, timeout=WAIT_S: s.next_event_in("farm", "c", lease=30, timeout=timeout)


def open_store(path, kind):
    s = hotstore.open(path, segment_size=1 << 20)
    s.set_event_policy(expected_fragments=1)
    if kind == "next_event_in":
        s.create_group("farm", required=True)
    return s


@pytest.mark.parametrize("kind", ["next_event", "next_event_in"])
def test_close_ends_a_wait_for_an_event(path, kind):
    """A consumer thread waits for an event (nothing comes); the main thread closes the
    store: close() returns at once and the wait raises StoreClosed."""
    s = open_store(path, kind)
    call = wait_call(kind)
    started = threading.Event()
    result = {}

    def consumer():
        started.set()
        t0 = time.monotonic()
        try:
            result["value"] = call(s)
        except BaseException as e:  # noqa: BLE001 - the verdict is the main thread's
            result["value"] = e
        result["waited"] = time.monotonic() - t0

    waiter = threading.Thread(target=consumer, daemon=True)
    waiter.start()
    assert started.wait(HANG_S)
    # Let the consumer get into its wait (it releases the GIL there, so this thread runs).
    time.sleep(0.5)
    assert waiter.is_alive() and "value" not in result, f"the wait ended early: {result}"

    closed = threading.Event()
    closer = threading.Thread(target=lambda: (s.close(), closed.set()), daemon=True)
    t0 = time.monotonic()
    closer.start()
    closer.join(HANG_S)
    took = time.monotonic() - t0
    assert closed.is_set(), (
        f"close() still waits after {took:.1f} s: the consumer's {kind}(timeout={WAIT_S}) "
        "holds the store"
    )
    waiter.join(HANG_S)
    assert not waiter.is_alive(), f"{kind} still waits {HANG_S} s after close()"
    assert s.closed
    # The wait really was in progress when close() came, and was ended by it.
    assert isinstance(result["value"], errors.StoreClosed), result
    assert "closed" in str(result["value"])
    assert result["waited"] >= 0.4, result


@pytest.mark.parametrize("kind", ["next_event", "next_event_in"])
def test_a_signal_interrupts_a_wait_for_an_event(path, kind):
    """A signal (here SIGUSR1 with a handler that raises, as Ctrl-C raises
    KeyboardInterrupt) arriving during a wait is handled during it: the exception ends the
    wait, which no longer runs to its timeout first."""
    s = open_store(path, kind)
    call = wait_call(kind)

    class Interrupted(Exception):
        pass

    def handler(signum, frame):
        raise Interrupted()

    old = signal.signal(signal.SIGUSR1, handler)
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGUSR1))
    try:
        t0 = time.monotonic()
        timer.start()
        with pytest.raises(Interrupted):
            # Ends with the timeout (then the handler raises) if the wait ignores signals.
            call(s, timeout=2 * HANG_S)
        took = time.monotonic() - t0
    finally:
        timer.cancel()
        signal.signal(signal.SIGUSR1, old)
    assert took < HANG_S, f"the signal was handled only when the wait ended ({took:.1f} s)"
    # The store works on.
    s.put(frag(1, 0), b"x")
    c = call(s, timeout=HANG_S)
    assert c is not None and c.event == (1, 1)
    c.ack()
    s.close()


@pytest.mark.parametrize("kind", ["next_event", "next_event_in"])
def test_a_wait_in_slices_still_gets_the_event(path, kind):
    """An event that becomes READY after several slices of the wait is claimed at once, and
    a wait that gets nothing ends after its timeout, not before."""
    s = open_store(path, kind)
    call = wait_call(kind)
    t0 = time.monotonic()
    assert call(s, timeout=0.35) is None
    assert time.monotonic() - t0 >= 0.35
    assert call(s, timeout=0) is None  # no wait at all
    timer = threading.Timer(0.35, s.put, (frag(2, 0), b"y"))
    timer.start()
    try:
        c = call(s, timeout=2 * HANG_S)
    finally:
        timer.join()
    assert c is not None and c.event == (1, 2)
    c.ack()
    s.close()


# --------------------------------------------------------------------------------------------
# Found in a later review: an empty event id, the directory lock in forked children, the
# fields of groups().
# --------------------------------------------------------------------------------------------


def test_an_empty_event_id_is_refused(path):
    """The empty id is the prefix of every key: ``event(b"")`` returned every fragment of the
    store as one event. It is refused (ValueError), as is an id shorter than the layout's
    event prefix (the prefix of many events); the other calls taking an event refuse it too."""
    with hotstore.open(path, segment_size=1 << 20, durability="memory") as s:
        for ev in (1, 2):
            s.put(frag(ev, 0), b"fragment")
        s.put(b"calibration", b"not a fragment")
        for call in (s.event, s.event_info, s.seal):
            with pytest.raises(ValueError, match="an event id must not be empty") as e:
                call(b"")
            assert isinstance(e.value, errors.InvalidArgument)
        with pytest.raises(ValueError, match="an event id of this store is 12 bytes"):
            s.event(hotstore.event_id(1, 1)[:4])  # the prefix of all of run 1
        # Well-formed ids work on.
        assert [k for k, _ in s.event((1, 2))] == [frag(2, 0)]
        assert [k for k, _ in s.event(hotstore.event_id(1, 1))] == [frag(1, 0)]


def test_a_forked_child_does_not_keep_the_directory_lock(path):
    """The store's lock is a flock on its LOCK file, which a fork shares with the child: a
    child still alive after the parent closed the store kept the directory locked, and the
    parent's reopen was refused (StoreLocked). The child is released through a pipe, so the
    reopen surely happens while it lives."""
    s = hotstore.open(path, segment_size=1 << 20)
    s.put(b"k", b"v")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: waits for the parent, touches nothing else
        try:
            os.close(w)
            os.read(r, 1)  # returns when the parent closes its end
        finally:
            os._exit(0)
    os.close(r)
    try:
        # The child's handler did not release the parent's lock: still locked.
        with pytest.raises(errors.StoreLocked):
            hotstore.open(path)
        s.close()
        with hotstore.open(path) as again:  # StoreLocked before the fix
            assert again.get_bytes(b"k") == b"v"
        assert os.waitpid(pid, os.WNOHANG) == (0, 0), "the child ended before the reopen"
    finally:
        s.close()
        os.close(w)
        os.waitpid(pid, 0)


# The keys of a consumer group, as docs/protocol.md (EVENT.GROUPS) and python/README.md give
# them; the network client's groups() has the same (tests/python/test_client_review.py).
GROUP_KEYS = {
    "name",
    "required",
    "consumers",
    "pending",
    "lag",
    "poisoned",
    "delivered",
    "acked",
    "oldest-waiting-ms",
    "oldest-pending-ms",
}


def test_groups_have_the_documented_keys(path):
    """groups() used the engine's names (delivered_total, oldest_waiting in seconds...), the
    network client the protocol's: now both the protocol's. The old names still read."""
    with hotstore.open(path, segment_size=1 << 20, durability="memory") as s:
        s.set_event_policy(expected_fragments=1)
        s.create_group("farm")
        s.create_group("monitor", required=False)
        s.put(frag(1, 0), b"f")
        s.put(frag(2, 0), b"f")
        c = s.next_event_in("farm", "w1", lease=30)
        s.next_event_in("farm", "w1", lease=30).ack(hotstore.REMOVE)
        g = {x["name"]: x for x in s.groups()}
        assert set(g) == {"farm", "monitor"}
        for x in g.values():
            assert set(x) == GROUP_KEYS
        farm = g["farm"]
        assert (farm["required"], g["monitor"]["required"]) == (True, False)
        assert (farm["pending"], farm["delivered"], farm["acked"]) == (1, 2, 1)
        assert farm["oldest-pending-ms"] >= 0 and isinstance(farm["oldest-pending-ms"], int)
        assert g["monitor"]["oldest-pending-ms"] == -1
        # The former names, readable but not listed.
        assert (farm["delivered_total"], farm.get("acked_total")) == (2, 1)
        assert isinstance(farm["oldest_pending"], float)
        assert g["monitor"]["oldest_pending"] is None
        assert farm.get("no such field", "absent") == "absent"
        with pytest.raises(KeyError):
            farm["no such field"]
        c.release()
