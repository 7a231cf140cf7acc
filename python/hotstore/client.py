"""A small client for the DAQ commands of ``hotstore serve``, over redis-py.

``hotstore serve`` speaks the Redis protocol (see ``docs/protocol.md``), so any Redis client
can talk to it; this module adds typed calls for the DAQ commands (FRAG.*, EVENT.*,
STORE.STATS) and maps the server's error codes to exceptions::

    from hotstore_client import HotstoreClient, ClaimLostError

    hs = HotstoreClient("127.0.0.1", 6380)
    hs.frag_put(1, 42, 0, 0, b"detector zero")          # readout
    hs.frag_put(1, 42, 1, 0, b"detector one")
    hs.event_seal(1, 42)                               # no more fragments: READY
    ev = hs.event_next(lease_ms=10_000, block_ms=1000)  # selection farm
    if ev is not None:
        for detector, component, value in ev.fragments:
            ...
        hs.event_ack(ev.token, remove=True)

Claims belong to the connection that made them: the server gives an event back (READY) when
that connection closes. A :class:`HotstoreClient` therefore owns exactly one connection (and
is not meant to be shared between threads: use one client per thread). The standard commands
are available through :attr:`HotstoreClient.redis`, a ``redis.Redis`` on that connection.

Only redis-py is needed (``pip install redis``); the module is pure Python.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple, Union

import redis
from redis.backoff import NoBackoff
from redis.exceptions import ResponseError
from redis.retry import Retry

__all__ = [
    "HotstoreClient",
    "ClaimedEvent",
    "EventInfo",
    "Fragment",
    "HotstoreError",
    "StoreFullError",
    "LateFragmentError",
    "ClaimLostError",
    "NoEventError",
    "AlreadyAckedError",
    "NoGroupError",
    "StoreIOError",
    "DURABILITIES",
]

#: The values the ``DURABILITY`` option takes.
DURABILITIES = ("memory", "persisted")


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------


# ``socket_timeout`` not given: :attr:`HotstoreClient.DEFAULT_SOCKET_TIMEOUT` (``None`` is
# "wait forever", so it cannot mean "not given").
_DEFAULT: Any = object()


class HotstoreError(ResponseError):
    """An error reply of the server with a hotstore error code.

    A subclass of ``redis.exceptions.ResponseError``, so code that catches redis-py's errors
    still catches it. ``code`` is the error code (e.g. ``"FULL"``), ``message`` the text after
    it; ``str(err)`` is the whole reply, as redis-py gives it.
    """

    #: The error code this class stands for (set on each subclass).
    CODE = ""

    def __init__(self, text: str, code: Optional[str] = None):
        super().__init__(text, status_code=code or self.CODE)
        self.code = code or self.CODE
        rest = text.split(" ", 1)
        self.message = rest[1] if len(rest) == 2 and rest[0] == self.code else text


class StoreFullError(HotstoreError):
    """``-FULL``: the store is full. Consume (ack) events or free space, then retry."""

    CODE = "FULL"


class LateFragmentError(HotstoreError):
    """``-LATE``: a fragment for an event already acknowledged; it was not stored. Drop it."""

    CODE = "LATE"


class ClaimLostError(HotstoreError):
    """``-CLAIMLOST``: the claim's lease expired or it was released; the event is offered
    again, so do not acknowledge it."""

    CODE = "CLAIMLOST"


class NoEventError(HotstoreError):
    """``-NOEVENT``: no such event (e.g. sealing an event that has no fragments)."""

    CODE = "NOEVENT"


class AlreadyAckedError(HotstoreError):
    """``-ACKED``: the event was already acknowledged."""

    CODE = "ACKED"


class NoGroupError(HotstoreError):
    """``-NOGROUP``: no consumer group has this name (create it with :meth:`group_create`)."""

    CODE = "NOGROUP"


class StoreIOError(HotstoreError):
    """``-IOERR``: the store failed and is read-only; see the server's log and the disk."""

    CODE = "IOERR"


_ERRORS = {
    cls.CODE: cls
    for cls in (
        StoreFullError,
        LateFragmentError,
        ClaimLostError,
        NoEventError,
        AlreadyAckedError,
        NoGroupError,
        StoreIOError,
    )
}


def map_error(err: ResponseError) -> ResponseError:
    """The typed exception for a redis-py ``ResponseError``, or ``err`` itself when its code
    is not one of hotstore's (``ERR`` and the like stay ``ResponseError``)."""
    if isinstance(err, HotstoreError):
        return err
    text = str(err)
    code = text.split(" ", 1)[0]
    cls = _ERRORS.get(code)
    if cls is None:
        return err
    mapped = cls(text, code)
    mapped.__cause__ = err
    return mapped


# --------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------


class Fragment(NamedTuple):
    """One fragment of an event: ``(detector, component, value)``; a plain tuple too."""

    detector: int
    component: int
    value: bytes


@dataclass
class ClaimedEvent:
    """An event claimed with :meth:`HotstoreClient.event_next`.

    ``token`` names the claim for :meth:`HotstoreClient.event_ack` and
    :meth:`HotstoreClient.event_release` (from any connection); ``incomplete`` is true if the
    event became READY by its timeout before all expected fragments arrived; ``fragments``
    are ``(detector, component, value)`` in key order.
    """

    token: str
    run: int
    event: int
    incomplete: bool
    fragments: List[Fragment] = field(default_factory=list)


@dataclass
class EventInfo:
    """One row of :meth:`HotstoreClient.event_range`.

    ``state`` is ``"open"``, ``"ready"``, ``"claimed"`` or ``"kept"``; ``fragments`` and
    ``bytes`` count the fragments stored and their value bytes.
    """

    event: int
    state: str
    fragments: int
    bytes: int
    incomplete: bool


def _pairs(flat: Any) -> Dict[str, Any]:
    """A flat field/value reply (or a RESP3 map) as a dict with text keys and values."""
    items = list(flat.items()) if isinstance(flat, dict) else list(zip(flat[0::2], flat[1::2]))
    return {_text(k): (_text(v) if isinstance(v, bytes) else v) for k, v in items}


def _text(v: Any) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, (bytes, bytearray)) else str(v)


def _scalar(v: Any) -> Union[int, float, str]:
    """A STORE.STATS value: integers stay integers, numeric strings become numbers."""
    if isinstance(v, (int, float)):
        return v
    s = _text(v)
    try:
        return int(s)
    except ValueError:
        pass
    try:
        return float(s)
    except ValueError:
        return s


def _fragments(reply: Optional[Sequence[Any]]) -> List[Fragment]:
    return [Fragment(int(d), int(c), bytes(v)) for d, c, v in (reply or [])]


def as_value(value: Any) -> Any:
    """A value as redis-py sends it right: bytes, str, int and float as they are; any other
    buffer (a numpy array, a memoryview of one, bytearray...) as a flat byte view.

    Fix (found in review): redis-py refuses a numpy array (``DataError``) and sends a
    memoryview with ``len()`` as its length, which counts items, not bytes: a memoryview of
    a uint16 array announced half its bytes and broke the connection's framing (``Protocol
    error: bulk string not terminated by CRLF``). The embedded store takes any buffer.
    """
    if isinstance(value, (bytes, str, int, float)):
        return value
    try:
        view = memoryview(value)
    except TypeError:
        return value  # not a buffer: redis-py says what it accepts
    if view.c_contiguous:
        return view.cast("B") if (view.ndim != 1 or view.format != "B") else view
    return view.tobytes()  # a copy, in C order


def _durability(args: List[Any], durability: Optional[str]) -> List[Any]:
    if durability is not None:
        if durability not in DURABILITIES:
            raise ValueError(f"durability must be one of {DURABILITIES}, not {durability!r}")
        args += ["DURABILITY", durability]
    return args


# --------------------------------------------------------------------------------------------
# Client
# --------------------------------------------------------------------------------------------


class HotstoreClient:
    """A connection to ``hotstore serve`` with typed DAQ calls.

    ``protocol`` is 2 (RESP2) or 3 (RESP3, negotiated with ``HELLO 3``); the results are the
    same either way. ``password`` authenticates (``AUTH``, or ``HELLO 3 AUTH`` with RESP3)
    against a server started with ``--requirepass``. ``client_name`` sets CLIENT SETNAME,
    which is also the default consumer name of claims. ``unix_socket_path`` connects to
    ``--unixsocket`` instead of TCP. Other keyword arguments go to ``redis.Redis``.

    ``socket_timeout`` bounds the wait for each reply (by default
    :attr:`DEFAULT_SOCKET_TIMEOUT`, 30 s; ``None`` waits forever); a blocking
    :meth:`event_next` waits its ``block_ms`` more. A timeout or a lost connection is raised
    (``redis.exceptions.TimeoutError``, ``ConnectionError``): the client does not reconnect
    and send the command again on its own (``retry=redis.retry.Retry(...)`` turns redis-py's
    retries on, at the cost of claims given back and writes repeated behind the caller's
    back).

    Every call raises the typed exceptions of this module for hotstore's error codes and
    ``redis.exceptions.ResponseError`` for ``-ERR`` (bad arguments).
    """

    #: Seconds the server may take to answer when ``socket_timeout`` is not given. Fix (found
    #: in review, as for ``ClusterClient``): with no default, a server that accepted the
    #: connection and stopped answering held the caller until the connection broke.
    DEFAULT_SOCKET_TIMEOUT: Optional[float] = 30.0

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 6380,
        password: Optional[str] = None,
        protocol: int = 2,
        *,
        username: Optional[str] = None,
        client_name: Optional[str] = None,
        unix_socket_path: Optional[str] = None,
        socket_timeout: Any = _DEFAULT,
        **redis_kwargs: Any,
    ):
        if socket_timeout is _DEFAULT:
            socket_timeout = self.DEFAULT_SOCKET_TIMEOUT
        kwargs: Dict[str, Any] = dict(
            password=password,
            username=username,
            protocol=protocol,
            client_name=client_name,
            socket_timeout=socket_timeout,
            decode_responses=False,
            # Claims live as long as the connection that made them: one connection per
            # client, never swapped behind the caller's back.
            single_connection_client=True,
            # No silent retry: redis-py's default (3 retries on ConnectionError and
            # TimeoutError) reconnects, which gives back every claim the connection holds,
            # and sends the command again, though a write whose reply was late may have
            # taken effect (an EVENT.ACK then fails with AlreadyAckedError, a FRAG.PUT is
            # stored twice). A timeout or a lost connection is reported to the caller.
            retry=Retry(NoBackoff(), 0),
        )
        if unix_socket_path is not None:
            kwargs["unix_socket_path"] = unix_socket_path
        else:
            kwargs.update(host=host, port=port)
        kwargs.update(redis_kwargs)
        #: The underlying ``redis.Redis`` (one connection), for the standard commands.
        self.redis = redis.Redis(**kwargs)
        self.protocol = protocol

    # -- plumbing ------------------------------------------------------------------------------

    def execute(self, *args: Any) -> Any:
        """Sends one command and returns its reply, mapping hotstore's error codes."""
        try:
            return self.redis.execute_command(*args)
        except ResponseError as e:
            raise map_error(e) from e

    def _execute_blocking(self, block_ms: Optional[int], *args: Any) -> Any:
        """:meth:`execute` for a command the server holds up to ``block_ms`` (BLOCK; 0:
        forever) before it answers: the read of its reply waits that much longer than
        ``socket_timeout`` (as the Rust client and the cluster consumer do), forever for 0;
        the connection's timeout is back as it was afterwards."""
        conn = getattr(self.redis, "connection", None)
        narrow = getattr(conn, "socket_timeout", None)
        if block_ms is None or conn is None or narrow is None:
            return self.execute(*args)  # no wait, or no read timeout to widen
        wide = None if int(block_ms) == 0 else narrow + int(block_ms) / 1000.0
        # The connection is made again by the first call after a failure: make it now, to
        # widen its socket's timeout (the socket's own: the parser reads with it).
        conn.connect()
        conn._sock.settimeout(wide)
        try:
            return self.execute(*args)
        finally:
            sock = conn._sock  # None if the call failed and disconnected
            if sock is not None:
                sock.settimeout(narrow)

    def close(self) -> None:
        """Closes the connection. Events this connection still holds go back to READY."""
        self.redis.close()

    def __enter__(self) -> "HotstoreClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def ping(self) -> bool:
        """True if the server answers PING."""
        return bool(self.redis.ping())

    # -- fragments -----------------------------------------------------------------------------

    def frag_put(
        self,
        run: int,
        event: int,
        detector: int,
        component: int,
        value: bytes,
        durability: Optional[str] = None,
    ) -> None:
        """Stores one fragment (``FRAG.PUT``); returns once it meets its durability (the
        server's default, or ``"memory"``/``"persisted"``).

        Raises :class:`LateFragmentError` if the event was already acknowledged and
        :class:`StoreFullError` if the store is full.
        """
        self.execute(
            *_durability(
                ["FRAG.PUT", run, event, detector, component, as_value(value)], durability
            )
        )

    def frag_put_many(
        self,
        fragments: Iterable[Tuple[int, int, int, int, bytes]],
        durability: Optional[str] = None,
        raise_on_error: bool = True,
    ) -> List[Optional[ResponseError]]:
        """Stores many fragments ``(run, event, detector, component, value)`` in one pipeline
        (one round trip; on a separate pooled connection, as pipelines are).

        All commands are sent and answered in order whatever fails. Returns one entry per
        fragment: ``None`` if stored, else the (typed) error. With ``raise_on_error`` (the
        default) the first error is raised instead, after the whole pipeline ran; its
        ``index`` attribute is the position of the failed fragment and ``results`` the
        whole list.
        """
        pipe = self.redis.pipeline(transaction=False)
        n = 0
        for run, event, detector, component, value in fragments:
            pipe.execute_command(
                *_durability(
                    ["FRAG.PUT", run, event, detector, component, as_value(value)], durability
                )
            )
            n += 1
        if n == 0:
            return []
        replies = pipe.execute(raise_on_error=False)
        results: List[Optional[ResponseError]] = [
            map_error(r) if isinstance(r, ResponseError) else None for r in replies
        ]
        if raise_on_error:
            for i, r in enumerate(results):
                if r is not None:
                    r.index = i  # type: ignore[attr-defined]
                    r.results = results  # type: ignore[attr-defined]
                    raise r
        return results

    def frag_get(self, run: int, event: int, detector: int, component: int) -> Optional[bytes]:
        """The value of one fragment (``FRAG.GET``), or None if it is not stored."""
        v = self.execute("FRAG.GET", run, event, detector, component)
        return None if v is None else bytes(v)

    # -- events --------------------------------------------------------------------------------

    def event_get(self, run: int, event: int) -> List[Fragment]:
        """All fragments of an event (``EVENT.GET``) as ``(detector, component, value)`` in key
        order; empty if it has none."""
        return _fragments(self.execute("EVENT.GET", run, event))

    def event_seal(self, run: int, event: int, durability: Optional[str] = None) -> None:
        """Seals an event (``EVENT.SEAL``): no more fragments will come, it is READY now, even
        if fragments are missing. Sealing twice is harmless.

        Raises :class:`NoEventError` if the event has no fragments and
        :class:`AlreadyAckedError` if it was acknowledged.
        """
        self.execute(*_durability(["EVENT.SEAL", run, event], durability))

    def event_next(
        self,
        lease_ms: int = 30000,
        block_ms: Optional[int] = None,
        consumer: Optional[str] = None,
        group: Optional[str] = None,
    ) -> Optional[ClaimedEvent]:
        """Claims the oldest READY event (``EVENT.NEXT``) for ``lease_ms``; None if none is
        READY (after waiting up to ``block_ms``; ``0`` waits forever, None does not wait).

        The claim is exclusive until it is acknowledged, released, its lease ends, or this
        client's connection closes. ``consumer`` defaults to the client name. ``group``
        claims in that consumer group (a store with groups requires one).
        """
        args: List[Any] = ["EVENT.NEXT", "LEASE", int(lease_ms)]
        if block_ms is not None:
            args += ["BLOCK", int(block_ms)]
        if consumer is not None:
            args += ["CONSUMER", consumer]
        if group is not None:
            args += ["GROUP", group]
        reply = self._execute_blocking(block_ms, *args)
        if reply is None:
            return None
        token, (run, event), incomplete, fragments = reply
        return ClaimedEvent(
            token=_text(token),
            run=int(run),
            event=int(event),
            incomplete=bool(int(incomplete)),
            fragments=_fragments(fragments),
        )

    def event_next_many(
        self,
        count: int,
        lease_ms: int = 30000,
        block_ms: Optional[int] = None,
        consumer: Optional[str] = None,
        group: Optional[str] = None,
    ) -> List[ClaimedEvent]:
        """Claims up to ``count`` READY events in one round trip (``EVENT.NEXT ... COUNT``),
        oldest first; an empty list if none is READY (after waiting up to ``block_ms`` for the
        first: the batch never waits for its last ones). ``count`` is 1 to 10000. ``group``
        as for :meth:`event_next`.
        """
        args: List[Any] = ["EVENT.NEXT", "LEASE", int(lease_ms), "COUNT", int(count)]
        if block_ms is not None:
            args += ["BLOCK", int(block_ms)]
        if consumer is not None:
            args += ["CONSUMER", consumer]
        if group is not None:
            args += ["GROUP", group]
        return self._claims(self._execute_blocking(block_ms, *args))

    def event_ack_many(
        self, tokens: Sequence[str], remove: bool = True, durability: Optional[str] = None
    ) -> List[Optional[ResponseError]]:
        """Acknowledges many claims in one command (``EVENT.ACK t1 t2 ... REMOVE|KEEP``) and
        one group commit. Returns one entry per token, in order: None if it took effect, else
        the typed error (:class:`ClaimLostError`, :class:`AlreadyAckedError`, ...), which is
        returned, not raised, so one lost claim does not hide the others' results.
        """
        if not tokens:
            return []
        what = "REMOVE" if remove else "KEEP"
        reply = self.execute(*_durability(["EVENT.ACK", *tokens, what], durability))
        if len(tokens) == 1:
            return [None]
        return [map_error(r) if isinstance(r, ResponseError) else None for r in reply]

    def event_ack_next(
        self,
        tokens: Sequence[str],
        count: int,
        remove: bool = True,
        durability: Optional[str] = None,
        lease_ms: int = 30000,
        consumer: Optional[str] = None,
        group: Optional[str] = None,
    ) -> Tuple[List[Optional[ResponseError]], List[ClaimedEvent]]:
        """Acknowledges ``tokens`` and claims the next batch of up to ``count`` events in one
        round trip (the two commands pipelined: the server settles the acknowledgements, then
        claims, and answers both after one group commit). Returns the acknowledgement results
        (as :meth:`event_ack_many`) and the new claims (as :meth:`event_next_many`, without
        waiting). The loop of a batch consumer::

            claims = c.event_next_many(100, block_ms=0)
            while claims:
                process(claims)
                errors, claims = c.event_ack_next([x.token for x in claims], 100)
        """
        what = "REMOVE" if remove else "KEEP"
        next_args: List[Any] = ["EVENT.NEXT", "LEASE", int(lease_ms), "COUNT", int(count)]
        if consumer is not None:
            next_args += ["CONSUMER", consumer]
        if group is not None:
            next_args += ["GROUP", group]
        pipe = self.redis.pipeline(transaction=False)
        if tokens:
            pipe.execute_command(*_durability(["EVENT.ACK", *tokens, what], durability))
        pipe.execute_command(*next_args)
        replies = pipe.execute(raise_on_error=False)
        results: List[Optional[ResponseError]] = []
        if tokens:
            acked = replies[0]
            if isinstance(acked, ResponseError):
                if len(tokens) > 1:
                    raise map_error(acked)  # the whole command was refused (bad arguments)
                results = [map_error(acked)]
            elif len(tokens) == 1:
                results = [None]
            else:
                results = [map_error(r) if isinstance(r, ResponseError) else None for r in acked]
        claimed = replies[-1]
        if isinstance(claimed, ResponseError):
            raise map_error(claimed)
        return results, self._claims(claimed)

    def _claims(self, reply: Any) -> List[ClaimedEvent]:
        if reply is None:
            return []
        # Positional and inlined: this loop is most of a batch consumer's own time.
        return [
            ClaimedEvent(
                token.decode(),
                int(run),
                int(event),
                incomplete == 1,
                [Fragment(d, c, v) for d, c, v in fragments],
            )
            for token, (run, event), incomplete, fragments in reply
        ]

    def event_ack(self, token: str, remove: bool = True, durability: Optional[str] = None) -> None:
        """Acknowledges a claim (``EVENT.ACK``): ``remove=True`` deletes the event's fragments
        (atomically), ``False`` keeps them stored; either way the event is never offered again
        and later fragments for it are refused (:class:`LateFragmentError`).

        Raises :class:`ClaimLostError` if the claim is no longer held (lease ended, released).
        """
        self.execute(
            *_durability(["EVENT.ACK", token, "REMOVE" if remove else "KEEP"], durability)
        )

    def event_release(self, token: str) -> None:
        """Gives a claimed event back (``EVENT.RELEASE``): READY again, in its old place.

        Raises :class:`ClaimLostError` if the claim is no longer held.
        """
        self.execute("EVENT.RELEASE", token)

    def event_pending(
        self, count: Optional[int] = None, group: Optional[str] = None
    ) -> List[Dict[str, Any]]:
        """The claims held now (``EVENT.PENDING``), oldest first: dicts with ``token``,
        ``consumer``, ``held_ms``, ``lease_left_ms`` and ``deliveries``; of ``group``, or of
        the default queue."""
        args: List[Any] = ["EVENT.PENDING"]
        if count is not None:
            args += ["COUNT", int(count)]
        if group is not None:
            args += ["GROUP", group]
        return [
            {
                "token": _text(t),
                "consumer": _text(c),
                "held_ms": int(h),
                "lease_left_ms": int(left),
                "deliveries": int(d),
            }
            for t, c, h, left, d in (self.execute(*args) or [])
        ]

    # -- consumer groups -------------------------------------------------------------------------

    def group_create(self, name: str, required: bool = True) -> None:
        """Creates consumer group ``name`` (``EVENT.GROUP CREATE``). Every group sees every
        READY event once; an event is removed only when every *required* group acknowledged
        it (``required=False``: a sampler that sees events while they are stored)."""
        self.execute("EVENT.GROUP", "CREATE", name, "REQUIRED" if required else "OPTIONAL")

    def group_destroy(self, name: str) -> None:
        """Destroys consumer group ``name`` (``EVENT.GROUP DESTROY``); :class:`NoGroupError`
        if there is none."""
        self.execute("EVENT.GROUP", "DESTROY", name)

    def groups(self) -> List[Dict[str, Any]]:
        """Every consumer group (``EVENT.GROUPS``) as a dict: ``name``, ``required`` (bool),
        ``consumers``, ``pending``, ``lag``, ``poisoned``, ``delivered``, ``acked``,
        ``oldest-waiting-ms`` and ``oldest-pending-ms`` (-1: none): the keys the embedded
        ``Store.groups()`` gives too."""
        groups = [_pairs(g) for g in (self.execute("EVENT.GROUPS") or [])]
        for g in groups:
            if "required" in g:
                g["required"] = bool(int(g["required"]))
        return groups

    def consumers(self, group: str) -> List[Dict[str, Any]]:
        """The consumers of ``group`` (``EVENT.CONSUMERS``): dicts with ``name``, ``pending``
        and ``idle`` (ms)."""
        return [_pairs(c) for c in (self.execute("EVENT.CONSUMERS", group) or [])]

    def event_range(
        self, run: int, start: int, stop: int, limit: Optional[int] = None
    ) -> List[EventInfo]:
        """The events ``start <= event < stop`` of ``run`` (``EVENT.RANGE``), in order, with
        their state, fragment count, bytes and incomplete flag; at most ``limit`` (server
        default 1000)."""
        args: List[Any] = ["EVENT.RANGE", run, start, stop]
        if limit is not None:
            args += ["LIMIT", int(limit)]
        return [
            EventInfo(
                event=int(e),
                state=_text(state),
                fragments=int(frags),
                bytes=int(nbytes),
                incomplete=bool(int(incomplete)),
            )
            for e, state, frags, nbytes, incomplete in (self.execute(*args) or [])
        ]

    # -- store ---------------------------------------------------------------------------------

    def store_stats(self) -> Dict[str, Union[int, float, str]]:
        """The store's counters (``STORE.STATS``) as a dict: ``entries``, ``live_bytes``,
        ``events_ready``, ``late_fragments``... (see docs/protocol.md). Numbers are ints."""
        reply = self.execute("STORE.STATS")
        if isinstance(reply, dict):
            items = list(reply.items())
        else:
            items = list(zip(reply[0::2], reply[1::2]))
        return {_text(k): _scalar(v) for k, v in items}
