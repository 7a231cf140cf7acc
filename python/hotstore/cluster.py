"""A client for a hotstore cluster (``hotstore serve --cluster MAP``), over redis-py.

A cluster is a fixed set of nodes, each serving the hash slots its map gives it (Redis
Cluster's 16384 slots), so writes and reads are routed by redis-py's ``RedisCluster``: keys by
their slot, events by their tag ``"run:event"`` (every fragment of an event lives on the node
of that tag). Claiming is per node (``EVENT.NEXT`` is node-local), so a
:class:`ClusterConsumer` claims from every node at once and hands the claims out in one
queue; each claim remembers its node, and is acknowledged there::

    from hotstore import ClusterClient

    hc = ClusterClient("127.0.0.1", 7001)               # any node: it names the others
    hc.frag_put(7, 42, 0, 0, b"detector zero")          # on the node of event 7:42
    hc.event_seal(7, 42)
    with hc.consumer(lease_ms=10_000) as consumer:       # one claiming thread per node
        claim = consumer.next(timeout=1.0)               # None if nothing came
        if claim is not None:
            process(claim.fragments)
            consumer.ack(claim)                          # on claim.node

A node that does not answer raises :class:`NodeUnavailableError` (a redis-py
``ConnectionError``) for its slots only: the other nodes' keys and events keep working. A
consumer reports a dead node (:attr:`ClusterConsumer.nodes`, the ``on_error`` callback, the
``hotstore.cluster`` logger) and keeps claiming from the others, retrying the dead one every
``retry_s`` seconds.

Only redis-py is needed (``pip install redis``); the module is pure Python.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from .client import (
    DURABILITIES,
    ClaimedEvent,
    Fragment,
    HotstoreClient,
    NoGroupError,
    _durability,
    as_value,
    _fragments,
    map_error,
)

__all__ = [
    "ClusterClient",
    "ClusterConsumer",
    "ClusterClaim",
    "NodeStatus",
    "NodeUnavailableError",
    "ClusterCommandError",
    "event_tag",
    "DURABILITIES",
]

log = logging.getLogger("hotstore.cluster")

#: Most claims a consumer asks one node for in one EVENT.NEXT (the server's COUNT limit).
MAX_COUNT = 10_000
#: Most claims a consumer holds per node before they are taken with next() (bounds memory
#: and the leases that run while claims wait in the queue).
MAX_BUFFERED_PER_NODE = 100_000

# Errors of a node that does not answer (refused, reset, timed out).
_NODE_ERRORS = (RedisConnectionError, RedisTimeoutError, OSError)

# ``socket_timeout`` not given: :attr:`ClusterClient.DEFAULT_SOCKET_TIMEOUT` (``None`` is
# "wait forever", so it cannot mean "not given").
_DEFAULT: Any = object()


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------


class NodeUnavailableError(RedisConnectionError):
    """A cluster node does not answer (connection refused or reset, timeout).

    A redis-py ``ConnectionError``, so code catching that catches it. ``node`` is the node's
    ``host:port`` (None if it could not be told), ``slot`` the hash slot of the request (None
    for a node-local request). Only that node's slots are affected: retry later, or write
    other events meanwhile.
    """

    def __init__(self, message: str, node: Optional[str] = None, slot: Optional[int] = None):
        super().__init__(message)
        self.node = node
        self.slot = slot


class ClusterCommandError(RedisClusterException):
    """A command sent to every node failed on some of them (:meth:`ClusterClient.group_create`
    and the like). ``errors`` maps each failed node's ``host:port`` to its exception; the
    other nodes did run it."""

    def __init__(self, what: str, errors: Dict[str, BaseException]):
        detail = "; ".join(f"{n}: {e}" for n, e in sorted(errors.items()))
        super().__init__(f"{what} failed on {len(errors)} node(s): {detail}")
        self.errors = errors


# --------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------


@dataclass
class ClusterClaim(ClaimedEvent):
    """An event claimed by a :class:`ClusterConsumer`: a :class:`ClaimedEvent` that also
    remembers ``node``, the ``host:port`` of the node that issued it, where
    :meth:`ClusterConsumer.ack` and :meth:`ClusterConsumer.release` send it."""

    node: str = ""


@dataclass
class NodeStatus:
    """What a :class:`ClusterConsumer` knows of one node: ``up`` is false while the node does
    not answer, ``error`` the last error (None if the last request succeeded, which also
    covers a node that came back), ``claimed`` the claims made there, ``failures`` the
    errors seen there, since the consumer started."""

    node: str
    up: bool = True
    error: Optional[BaseException] = None
    claimed: int = 0
    failures: int = 0


def event_tag(run: int, event: int) -> str:
    """The tag that names event (run, event) in a cluster, ``"run:event"``: the event lives on
    the node of this key's slot, and the event commands take it as their first argument."""
    return f"{int(run)}:{int(event)}"


def _addr(node: ClusterNode) -> str:
    return f"{node.host}:{node.port}"


def _split(addr: str) -> Tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host.strip("[]"), int(port)


# --------------------------------------------------------------------------------------------
# Client
# --------------------------------------------------------------------------------------------


class ClusterClient:
    """A hotstore cluster, through redis-py's ``RedisCluster``.

    Give one node (``host``, ``port``) or several (``startup_nodes``, ``host:port`` strings or
    ``(host, port)`` pairs): the client reads the map from the first that answers.
    ``password``, ``username``, ``protocol`` (2 or 3) and ``socket_timeout`` apply to every
    connection, including a consumer's. ``socket_timeout`` is how long a node may take to
    answer (and to accept a connection) before it is taken as down
    (:class:`NodeUnavailableError`): by default :attr:`DEFAULT_SOCKET_TIMEOUT` (30 s, as the
    Rust cluster client's ``DEFAULT_NODE_RESPONSE_TIMEOUT``); ``None`` waits forever, so a node
    that accepts connections but never answers (a stopped process, a lost route) holds the
    call forever. Other keyword arguments go to ``RedisCluster``
    (e.g. ``retry=`` to retry a dead node fewer times). :attr:`redis` is the ``RedisCluster``
    itself, for the standard commands.

    Calls raise the typed exceptions of :mod:`hotstore.client` for hotstore's error codes
    (:class:`~hotstore.client.LateFragmentError`, ...), :class:`NodeUnavailableError` when the
    node of the key or event does not answer, and redis-py's ``ResponseError`` for the rest.
    A ``ClusterClient`` may be shared between threads (``RedisCluster`` pools connections).
    """

    #: Seconds a node may take to answer when ``socket_timeout`` is not given. Fix (found in
    #: review): there was none, so one node that accepted connections and never answered
    #: held the caller forever (the Rust cluster client waits 30 s, then takes it as down).
    DEFAULT_SOCKET_TIMEOUT: Optional[float] = 30.0

    def __init__(
        self,
        host: Optional[str] = None,
        port: Optional[int] = None,
        *,
        startup_nodes: Optional[Sequence[Any]] = None,
        password: Optional[str] = None,
        username: Optional[str] = None,
        protocol: int = 2,
        socket_timeout: Any = _DEFAULT,
        **cluster_kwargs: Any,
    ):
        if socket_timeout is _DEFAULT:
            socket_timeout = self.DEFAULT_SOCKET_TIMEOUT
        nodes: List[ClusterNode] = []
        if host is not None or port is not None:
            nodes.append(ClusterNode(host or "127.0.0.1", int(port or 7001)))
        for n in startup_nodes or []:
            if isinstance(n, ClusterNode):
                nodes.append(n)
            elif isinstance(n, str):
                nodes.append(ClusterNode(*_split(n)))
            else:
                h, p = n
                nodes.append(ClusterNode(h, int(p)))
        if not nodes:
            raise ValueError("ClusterClient needs a node: host and port, or startup_nodes")
        #: Connection settings of every node connection (consumers open their own).
        self.connection_kwargs: Dict[str, Any] = dict(
            password=password,
            username=username,
            protocol=protocol,
            socket_timeout=socket_timeout,
        )
        try:
            #: The underlying ``redis.cluster.RedisCluster``, for the standard commands.
            self.redis = RedisCluster(
                startup_nodes=nodes,
                decode_responses=False,
                **self.connection_kwargs,
                **cluster_kwargs,
            )
        except (RedisClusterException, *_NODE_ERRORS) as e:  # type: ignore[misc]
            raise NodeUnavailableError(
                "no node of the cluster answers (tried %s, waiting up to %s for each): %s; "
                "check that the nodes run and are reachable, or name others in startup_nodes"
                % (
                    ", ".join(_addr(n) for n in nodes),
                    "forever" if socket_timeout is None else f"{socket_timeout} s",
                    e,
                )
            ) from e

    # -- plumbing ------------------------------------------------------------------------------

    def close(self) -> None:
        """Closes every connection of the client."""
        self.redis.close()

    def __enter__(self) -> "ClusterClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def node_of(self, key: Any) -> str:
        """``host:port`` of the node serving ``key`` (bytes or str) per the client's map."""
        return _addr(self.redis.get_node_from_key(key))

    def node_of_event(self, run: int, event: int) -> str:
        """``host:port`` of the node holding event (run, event)."""
        return self.node_of(event_tag(run, event))

    def nodes(self) -> List[str]:
        """``host:port`` of every node serving slots, in the map's order of slots."""
        return [_addr(n) for n in self.redis.get_primaries()]

    def execute(self, key: Any, *args: Any) -> Any:
        """Sends ``args`` (a command whose first key is ``key``) to the node of ``key``;
        maps hotstore's error codes and a dead node (:class:`NodeUnavailableError`)."""
        try:
            return self.redis.execute_command(*args)
        except ResponseError as e:
            raise map_error(e) from e
        except _NODE_ERRORS as e:
            slot = self.redis.keyslot(key)
            try:
                node: Optional[str] = self.node_of(key)
            except Exception:  # noqa: BLE001 - the map is being refreshed: name no node
                node = None
            raise NodeUnavailableError(
                f"cluster node {node or '?'} (slot {slot}) does not answer: {e}", node, slot
            ) from e

    def client(self, node: str, **kwargs: Any) -> HotstoreClient:
        """A new :class:`~hotstore.client.HotstoreClient` on one node (``host:port``), with
        the client's connection settings: for node-local commands (STORE.STATS, EVENT.RANGE,
        EVENT.PENDING ...). Close it when done."""
        host, port = _split(node)
        # No silent retry: a dead node is reported at once (a retried EVENT.ACK could also
        # have taken effect the first time).
        options: Dict[str, Any] = {"retry": Retry(NoBackoff(), 0), **self.connection_kwargs}
        options.update(kwargs)
        return HotstoreClient(host, port, **options)

    def on_every_node(self, what: str, call: Callable[[HotstoreClient], Any]) -> Dict[str, Any]:
        """Runs ``call(client)`` on every node (a fresh connection each) and returns the
        results by node; raises :class:`ClusterCommandError` naming the nodes where it
        failed, after trying them all."""
        results: Dict[str, Any] = {}
        errors: Dict[str, BaseException] = {}
        for node in self.nodes():
            try:
                with self.client(node) as c:
                    results[node] = call(c)
            except (ResponseError, *_NODE_ERRORS) as e:  # type: ignore[misc]
                errors[node] = e
        if errors:
            raise ClusterCommandError(what, errors)
        return results

    # -- keys ----------------------------------------------------------------------------------

    def set(self, key: Any, value: bytes) -> None:
        """``SET key value`` on the key's node."""
        self.execute(key, "SET", key, value)

    def get(self, key: Any) -> Optional[bytes]:
        """``GET key`` on the key's node: the value, or None."""
        v = self.execute(key, "GET", key)
        return None if v is None else bytes(v)

    def delete(self, key: Any) -> bool:
        """``DEL key`` on the key's node: True if it existed."""
        return bool(self.execute(key, "DEL", key))

    def dbsize(self) -> Dict[str, int]:
        """The number of keys on each node (``DBSIZE``), by node."""
        return self.on_every_node("DBSIZE", lambda c: int(c.redis.dbsize()))

    # -- fragments and events ------------------------------------------------------------------

    def frag_put(
        self,
        run: int,
        event: int,
        detector: int,
        component: int,
        value: bytes,
        durability: Optional[str] = None,
    ) -> None:
        """Stores one fragment on its event's node (``FRAG.PUT run:event d c value``); returns
        once it meets its durability. Raises as :meth:`HotstoreClient.frag_put`, and
        :class:`NodeUnavailableError` if the event's node does not answer."""
        tag = event_tag(run, event)
        self.execute(
            tag, *_durability(["FRAG.PUT", tag, detector, component, as_value(value)], durability)
        )

    def frag_get(self, run: int, event: int, detector: int, component: int) -> Optional[bytes]:
        """The value of one fragment (``FRAG.GET``), or None if it is not stored."""
        tag = event_tag(run, event)
        v = self.execute(tag, "FRAG.GET", tag, detector, component)
        return None if v is None else bytes(v)

    def event_get(self, run: int, event: int) -> List[Fragment]:
        """All fragments of an event (``EVENT.GET``), ``(detector, component, value)`` in key
        order; empty if it has none."""
        tag = event_tag(run, event)
        return _fragments(self.execute(tag, "EVENT.GET", tag))

    def event_seal(self, run: int, event: int, durability: Optional[str] = None) -> None:
        """Seals an event on its node (``EVENT.SEAL``): it is READY now. Raises as
        :meth:`HotstoreClient.event_seal`."""
        tag = event_tag(run, event)
        self.execute(tag, *_durability(["EVENT.SEAL", tag], durability))

    # -- consumer groups and per-node views ----------------------------------------------------

    def group_create(self, name: str, required: bool = True, exist_ok: bool = False) -> None:
        """Creates consumer group ``name`` on every node (a group is per node; a consumer
        with ``group=name`` claims in it on each). With ``exist_ok`` a node where it exists
        already is fine. Raises :class:`ClusterCommandError` naming the nodes where it could
        not be created (it was created on the others)."""

        def create(c: HotstoreClient) -> None:
            try:
                c.group_create(name, required)
            except ResponseError:
                if exist_ok and any(g.get("name") == name for g in c.groups()):
                    return
                raise

        self.on_every_node(f"EVENT.GROUP CREATE {name}", create)

    def group_destroy(self, name: str, missing_ok: bool = False) -> None:
        """Destroys consumer group ``name`` on every node (``missing_ok``: a node without it
        is fine). Raises :class:`ClusterCommandError` naming the nodes where it failed."""

        def destroy(c: HotstoreClient) -> None:
            try:
                c.group_destroy(name)
            except ResponseError as e:
                if missing_ok and isinstance(map_error(e), NoGroupError):
                    return
                raise

        self.on_every_node(f"EVENT.GROUP DESTROY {name}", destroy)

    def groups(self) -> Dict[str, List[Dict[str, Any]]]:
        """Every node's consumer groups (``EVENT.GROUPS``), by node."""
        return self.on_every_node("EVENT.GROUPS", lambda c: c.groups())

    def store_stats(self) -> Dict[str, Dict[str, Any]]:
        """Every node's counters (``STORE.STATS``), by node."""
        return self.on_every_node("STORE.STATS", lambda c: c.store_stats())

    # -- consuming -----------------------------------------------------------------------------

    def consumer(self, **kwargs: Any) -> "ClusterConsumer":
        """A :class:`ClusterConsumer` of every node of this cluster; see its arguments."""
        return ClusterConsumer(self, **kwargs)


# --------------------------------------------------------------------------------------------
# Consumer
# --------------------------------------------------------------------------------------------


class _Node:
    """A consumer's side of one node: its claiming thread, its ack connection, its credits."""

    def __init__(self, addr: str):
        self.addr = addr
        self.status = NodeStatus(addr)
        self.thread: Optional[threading.Thread] = None
        self.claimer: Optional[HotstoreClient] = None  # owned by the thread
        self.acker: Optional[HotstoreClient] = None  # under ack_lock
        self.ack_lock = threading.Lock()
        self.credits = 0  # claims this node may still add to the queue (under the cond)


class ClusterConsumer:
    """Claims READY events from every node of a cluster and hands them out in one queue.

    One thread per node claims with ``EVENT.NEXT LEASE lease_ms BLOCK block_ms COUNT count``
    on its own connection (blocking on the server: no polling) and puts the claims in the
    queue; :meth:`next` takes them in the order they came. A node keeps at most
    ``max_buffered`` claims in the queue (default ``2 * count``; bounds memory and the time
    a claim's lease runs before it is handed out), so a node with many events does not
    crowd out the others.

    Claims are exclusive to the connection that made them: they stay held while the
    consumer runs, and go back to READY on their node when it is closed (:meth:`close`).
    Acknowledge (:meth:`ack`, :meth:`ack_many`) or give back (:meth:`release`) each claim
    before its lease ends; it goes to the node that issued it, on a second connection per
    node (so an ack does not wait behind a blocked claim).

    ``group`` claims in that consumer group on every node (create it with
    :meth:`ClusterClient.group_create`); ``consumer`` names this consumer (default: the
    server's). A node that does not answer, or refuses the claim (e.g. no such group there),
    is reported (:attr:`nodes`, ``on_error(node, exc)``, the ``hotstore.cluster`` logger)
    and retried every ``retry_s`` seconds; the other nodes' claims keep coming.

    Arguments: ``lease_ms`` (default 30000), ``block_ms`` how long one EVENT.NEXT waits on
    the server (default 1000; also how long :meth:`close` may wait for the threads),
    ``count`` claims per EVENT.NEXT (1 to 10000, default 16), ``max_buffered`` (``count``
    to 100000), ``retry_s`` (default 1.0), ``nodes`` (``host:port`` list; default every
    node of the map).
    """

    def __init__(
        self,
        cluster: ClusterClient,
        *,
        lease_ms: int = 30000,
        block_ms: int = 1000,
        count: int = 16,
        group: Optional[str] = None,
        consumer: Optional[str] = None,
        max_buffered: Optional[int] = None,
        retry_s: float = 1.0,
        nodes: Optional[Sequence[str]] = None,
        on_error: Optional[Callable[[str, BaseException], None]] = None,
    ):
        if not 1 <= count <= MAX_COUNT:
            raise ValueError(f"count must be 1 to {MAX_COUNT}, not {count}")
        if block_ms <= 0:
            raise ValueError("block_ms must be positive (the threads must see close())")
        max_buffered = 2 * count if max_buffered is None else max_buffered
        if not count <= max_buffered <= MAX_BUFFERED_PER_NODE:
            raise ValueError(
                f"max_buffered must be count ({count}) to {MAX_BUFFERED_PER_NODE}, "
                f"not {max_buffered}"
            )
        self.cluster = cluster
        self.lease_ms = int(lease_ms)
        self.block_ms = int(block_ms)
        self.count = int(count)
        self.group = group
        self.consumer_name = consumer
        self.max_buffered = int(max_buffered)
        self.retry_s = float(retry_s)
        self.on_error = on_error
        self._queue: "queue.Queue[ClusterClaim]" = queue.Queue()
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._nodes: Dict[str, _Node] = {}
        for addr in nodes if nodes is not None else cluster.nodes():
            n = _Node(addr)
            n.credits = self.max_buffered
            self._nodes[addr] = n
        for n in self._nodes.values():
            n.thread = threading.Thread(
                target=self._claim_loop, args=(n,), name=f"hotstore-claim-{n.addr}", daemon=True
            )
            n.thread.start()

    # -- status --------------------------------------------------------------------------------

    @property
    def nodes(self) -> Dict[str, NodeStatus]:
        """What is known of each node (a snapshot): up or not, last error, claims made."""
        with self._cond:
            return {a: NodeStatus(**vars(n.status)) for a, n in self._nodes.items()}

    def down(self) -> List[str]:
        """The nodes that do not answer now."""
        return [a for a, s in self.nodes.items() if not s.up]

    # -- claiming thread -----------------------------------------------------------------------

    def _report(self, n: _Node, e: BaseException, up: bool) -> None:
        with self._cond:
            was_up = n.status.up and n.status.error is None
            n.status.up = up
            n.status.error = e
            n.status.failures += 1
        if was_up:
            log.warning("hotstore cluster node %s: %s (retrying every %ss)", n.addr, e, self.retry_s)
        if self.on_error is not None:
            try:
                self.on_error(n.addr, e)
            except Exception:  # noqa: BLE001 - a callback must not stop the claiming
                log.exception("on_error callback failed")

    def _drop_claimer(self, n: _Node) -> None:
        if n.claimer is not None:
            try:
                n.claimer.close()
            except Exception:  # noqa: BLE001 - closing a dead connection
                pass
            n.claimer = None

    def _claim_loop(self, n: _Node) -> None:
        while not self._stop.is_set():
            with self._cond:
                while n.credits == 0 and not self._stop.is_set():
                    self._cond.wait()
                want = min(self.count, n.credits)
            if self._stop.is_set():
                break
            try:
                if n.claimer is None:
                    # The socket waits the server's BLOCK longer than a reply may take, and
                    # at least 30 s more: a node that stops answering is taken as down (even
                    # with socket_timeout=None), a slow one is not.
                    kw = dict(self.cluster.connection_kwargs)
                    base = max(kw.get("socket_timeout") or 0.0, 30.0)
                    kw["socket_timeout"] = base + self.block_ms / 1000.0
                    kw["socket_connect_timeout"] = 10.0
                    n.claimer = self.cluster.client(n.addr, **kw)
                claims = n.claimer.event_next_many(
                    want,
                    lease_ms=self.lease_ms,
                    block_ms=self.block_ms,
                    consumer=self.consumer_name,
                    group=self.group,
                )
            except _NODE_ERRORS as e:
                self._drop_claimer(n)  # its claims, if any, go back to READY there
                self._report(n, e, up=False)
                self._stop.wait(self.retry_s)
                continue
            except ResponseError as e:  # e.g. NOGROUP: the group is not on this node (yet)
                self._report(n, map_error(e), up=True)
                self._stop.wait(self.retry_s)
                continue
            with self._cond:
                if not n.status.up or n.status.error is not None:
                    log.warning("hotstore cluster node %s answers again", n.addr)
                n.status.up = True
                n.status.error = None
                n.status.claimed += len(claims)
                n.credits -= len(claims)
            for c in claims:
                self._queue.put(
                    ClusterClaim(c.token, c.run, c.event, c.incomplete, c.fragments, n.addr)
                )
        self._drop_claimer(n)

    # -- taking claims -------------------------------------------------------------------------

    def _taken(self, claim: ClusterClaim) -> None:
        with self._cond:
            n = self._nodes.get(claim.node)
            if n is not None:
                n.credits += 1
                self._cond.notify_all()

    def next(self, timeout: Optional[float] = None) -> Optional[ClusterClaim]:
        """The next claim of any node, waiting up to ``timeout`` seconds (None: until one
        comes or the consumer is closed; 0: no wait); None if none came."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._stop.is_set():
                try:
                    claim = self._queue.get_nowait()
                except queue.Empty:
                    return None
            else:
                # Wake up now and then to see close() when waiting forever.
                left = 1.0 if deadline is None else deadline - time.monotonic()
                try:
                    claim = self._queue.get(timeout=max(0.0, min(left, 1.0)))
                except queue.Empty:
                    if deadline is not None and time.monotonic() >= deadline:
                        return None
                    continue
            self._taken(claim)
            return claim

    def next_many(self, max_count: int, timeout: Optional[float] = None) -> List[ClusterClaim]:
        """Up to ``max_count`` claims: waits up to ``timeout`` for the first (as :meth:`next`),
        then takes those already queued without waiting."""
        first = self.next(timeout)
        if first is None:
            return []
        out = [first]
        while len(out) < max_count:
            try:
                claim = self._queue.get_nowait()
            except queue.Empty:
                break
            self._taken(claim)
            out.append(claim)
        return out

    def __iter__(self) -> Iterator[ClusterClaim]:
        """Claims as they come, until :meth:`close`."""
        while not self._stop.is_set():
            claim = self.next(timeout=1.0)
            if claim is not None:
                yield claim

    # -- settling claims -----------------------------------------------------------------------

    def _on_node(self, node: str, call: Callable[[HotstoreClient], Any]) -> Any:
        n = self._nodes.get(node)
        if n is None:
            raise ValueError(f"claim of node {node!r}, which this consumer does not claim from")
        with n.ack_lock:
            try:
                if n.acker is None:
                    n.acker = self.cluster.client(node, socket_connect_timeout=10.0)
                return call(n.acker)
            except _NODE_ERRORS as e:
                if n.acker is not None:
                    try:
                        n.acker.close()
                    except Exception:  # noqa: BLE001 - closing a dead connection
                        pass
                    n.acker = None
                raise NodeUnavailableError(
                    f"cluster node {node} does not answer: {e}", node
                ) from e

    def ack(self, claim: ClusterClaim, remove: bool = True, durability: Optional[str] = None) -> None:
        """Acknowledges a claim on its node (``EVENT.ACK``; ``remove`` as
        :meth:`HotstoreClient.event_ack`). Raises
        :class:`~hotstore.client.ClaimLostError` if the claim is no longer held (lease ended,
        or the node restarted) and :class:`NodeUnavailableError` if its node does not
        answer."""
        self._on_node(claim.node, lambda c: c.event_ack(claim.token, remove, durability))

    def ack_many(
        self,
        claims: Sequence[ClusterClaim],
        remove: bool = True,
        durability: Optional[str] = None,
    ) -> List[Optional[BaseException]]:
        """Acknowledges many claims, one EVENT.ACK per node. Returns one entry per claim, in
        order: None if it took effect, else its error (typed, e.g.
        :class:`~hotstore.client.ClaimLostError`; :class:`NodeUnavailableError` for every
        claim of a node that does not answer): returned, not raised, so one node's failure
        does not hide the others' results."""
        by_node: Dict[str, List[int]] = {}
        for i, c in enumerate(claims):
            by_node.setdefault(c.node, []).append(i)
        results: List[Optional[BaseException]] = [None] * len(claims)
        for node, idx in by_node.items():
            tokens = [claims[i].token for i in idx]
            try:
                got = self._on_node(node, lambda c: c.event_ack_many(tokens, remove, durability))
            except NodeUnavailableError as e:
                got = [e] * len(idx)
            for i, r in zip(idx, got):
                results[i] = r
        return results

    def release(self, claim: ClusterClaim) -> None:
        """Gives a claim back on its node (``EVENT.RELEASE``): READY again there. Raises as
        :meth:`ack`."""
        self._on_node(claim.node, lambda c: c.event_release(claim.token))

    # -- closing -------------------------------------------------------------------------------

    def close(self, timeout: Optional[float] = None) -> None:
        """Stops claiming and closes the connections: claims not acknowledged (taken or
        still queued) go back to READY on their nodes. Waits for the threads up to
        ``timeout`` seconds (default: ``block_ms`` plus a margin)."""
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        wait = (self.block_ms / 1000.0 + 5.0) if timeout is None else timeout
        deadline = time.monotonic() + wait
        for n in self._nodes.values():
            if n.thread is not None:
                n.thread.join(max(0.0, deadline - time.monotonic()))
        for n in self._nodes.values():
            with n.ack_lock:
                if n.acker is not None:
                    n.acker.close()
                    n.acker = None

    def __enter__(self) -> "ClusterConsumer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
