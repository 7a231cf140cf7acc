"""hotstore from Python: the embedded store (in-process, zero-copy numpy) and the network client.

Embedded (the native part, built by ``pip install ./python``)::

    import hotstore, numpy as np
    with hotstore.open("/dev/shm/demo") as s:
        s.put(b"frame/1", np.arange(1024, dtype=np.float32))
        a = np.frombuffer(s.get(b"frame/1"), dtype=np.float32)   # no copy: store memory
        with s.reserve(b"frame/2", 4096) as r:                   # no copy: write in place
            r.array(np.float32)[:] = 1.0                          # committed at the end

Over the network (``hotstore serve``; needs redis-py)::

    hs = hotstore.Client("127.0.0.1", 6380)

A cluster (``hotstore serve --cluster MAP``; routed by redis-py's RedisCluster, claimed from
every node by a ClusterConsumer)::

    hc = hotstore.ClusterClient("127.0.0.1", 7001)
    hc.frag_put(7, 42, 0, 0, b"fragment")
    with hc.consumer() as consumer:
        claim = consumer.next(timeout=1.0)

See python/README.md for the whole API, and ``hotstore.errors`` for the exceptions.
"""

from __future__ import annotations

from typing import Any

from . import errors
from .errors import *  # noqa: F401,F403

try:
    from ._hotstore import (  # noqa: F401
        KEEP,
        MAX_KEY_LEN,
        MAX_VALUE_LEN,
        REMOVE,
        Claim,
        Reservation,
        Store,
        Value,
        event_id,
        fragment_key,
        parse_fragment_key,
    )

    _native_error = None
except ImportError as e:  # the network client works without the native part
    _native_error = e

MEMORY = "memory"
PERSISTED = "persisted"

__all__ = [
    "open",
    "Store",
    "Value",
    "Reservation",
    "Claim",
    "Client",
    "ClusterClient",
    "ClusterConsumer",
    "ClusterClaim",
    "fragment_key",
    "event_id",
    "parse_fragment_key",
    "KEEP",
    "REMOVE",
    "MEMORY",
    "PERSISTED",
    "MAX_KEY_LEN",
    "MAX_VALUE_LEN",
    "errors",
] + errors.__all__


def open(path: Any, **options: Any) -> "Store":  # noqa: A001 - the module's verb, like io.open
    """Opens (or creates) the store at ``path`` in this process; see :class:`Store` for the
    options. Use it as a context manager to close it."""
    if _native_error is not None:
        raise ImportError(
            "the embedded store (hotstore._hotstore) is not built: install the package with "
            "`pip install ./python` (%s)" % _native_error
        )
    return Store(path, **options)


_CLIENT_NAMES = {
    "Client": "HotstoreClient",
    "HotstoreClient": "HotstoreClient",
    "client": None,
}

_CLUSTER_NAMES = {
    "ClusterClient": "ClusterClient",
    "ClusterConsumer": "ClusterConsumer",
    "ClusterClaim": "ClusterClaim",
    "NodeUnavailableError": "NodeUnavailableError",
    "cluster": None,
}


def __getattr__(name: str) -> Any:
    # The network clients need redis-py: imported on first use, so the embedded store does not.
    if name in _CLIENT_NAMES:
        import importlib

        client = importlib.import_module("hotstore.client")

        attr = _CLIENT_NAMES[name]
        return client if attr is None else getattr(client, attr)
    if name in _CLUSTER_NAMES:
        import importlib

        cluster = importlib.import_module("hotstore.cluster")

        attr = _CLUSTER_NAMES[name]
        return cluster if attr is None else getattr(cluster, attr)
    if _native_error is not None and name in ("Store", "Value", "Reservation", "Claim"):
        raise ImportError(
            "hotstore.%s needs the native part, which is not built: `pip install ./python` (%s)"
            % (name, _native_error)
        )
    raise AttributeError("module 'hotstore' has no attribute %r" % name)
