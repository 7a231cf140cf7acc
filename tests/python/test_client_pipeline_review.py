"""Regression test of a Python-pipeline review of the network client: numpy arrays and
memoryviews as fragment values (needs no server: the command redis-py would send is checked).

Run: ``python3 -m pytest tests/python/test_client_pipeline_review.py``.
"""

import numpy as np
import redis

from hotstore.client import HotstoreClient, as_value


def sent(value):
    """The bulk strings of the FRAG.PUT command redis-py packs for `value`."""
    conn = redis.Connection()
    packed = b"".join(
        bytes(p) for p in conn.pack_command("FRAG.PUT", 1, 2, 3, 4, as_value(value))
    )
    return packed


def test_numpy_values_are_sent_as_their_bytes():
    a = np.arange(6, dtype=np.uint16).reshape(2, 3)
    want = redis.Connection().pack_command("FRAG.PUT", 1, 2, 3, 4, a.tobytes())
    want = b"".join(bytes(p) for p in want)
    # Before: ndarray was a DataError, and a memoryview announced its item count as its
    # length (6, for 12 bytes), which broke the connection's framing.
    assert sent(a) == want
    assert sent(memoryview(a)) == want
    assert sent(np.asfortranarray(a)) == b"".join(
        bytes(p) for p in redis.Connection().pack_command("FRAG.PUT", 1, 2, 3, 4, a.tobytes())
    )
    assert sent(bytearray(b"ab")) == b"".join(
        bytes(p) for p in redis.Connection().pack_command("FRAG.PUT", 1, 2, 3, 4, b"ab")
    )
    assert as_value(b"x") == b"x" and as_value("s") == "s" and as_value(3) == 3


def test_frag_put_takes_an_array():
    # Not connected (the client connects at construction): frag_put on a stand-in whose
    # execute records the command.
    import types

    calls = []
    fake = types.SimpleNamespace(execute=lambda *args: calls.append(args))
    HotstoreClient.frag_put(fake, 1, 2, 3, 4, np.arange(4, dtype=np.uint16))
    assert bytes(calls[0][-1]) == np.arange(4, dtype=np.uint16).tobytes()
