"""Type stubs of the native part (crates/hotstore-py). Documented in python/README.md."""

from os import PathLike
from typing import Any, Iterable, Iterator, Literal, Optional, Sequence, Tuple, Union

from collections.abc import Buffer

Key = Union[str, Buffer]
Durability = Literal["memory", "persisted"]
How = Literal["remove", "keep"]
Event = Union[Tuple[int, int], Buffer]

MAX_KEY_LEN: int
MAX_VALUE_LEN: int
KEEP: Literal["keep"]
REMOVE: Literal["remove"]

def fragment_key(run: int, event: int, detector: int, component: int) -> bytes:
    """The 16-byte default-layout key of a fragment (big-endian: byte order is numeric order)."""

def event_id(run: int, event: int) -> bytes:
    """The 12-byte id (key prefix) of event `event` of run `run`."""

def parse_fragment_key(key: Key) -> Optional[Tuple[int, int, int, int]]:
    """(run, event, detector, component) of a default-layout key, or None."""

class Value(Buffer):
    """A stored value in place: a read-only buffer over the store's memory (no copy). Stays
    valid and unchanged while it, or any buffer over it, lives."""

    exports: int
    def __len__(self) -> int: ...
    def __bytes__(self) -> bytes: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...
    def tobytes(self) -> bytes:
        """A copy as bytes."""
    def array(self, dtype: Any = ..., shape: Union[int, Sequence[int], None] = ...) -> Any:
        """A read-only numpy array over the value (no copy)."""

class Reservation(Buffer):
    """Space reserved in the store's memory: a writable buffer; commit() publishes it."""

    nbytes: int
    state: Literal["open", "committing", "committed", "aborted"]
    exports: int
    def __len__(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...
    def array(self, dtype: Any = ..., shape: Union[int, Sequence[int], None] = ...) -> Any:
        """A writable numpy array over the reserved memory (no copy); sizes must match."""
    def fill(self, data: Buffer) -> None:
        """Copies `data`, exactly nbytes long, into the reservation."""
    def commit(self, durability: Optional[Durability] = None) -> None:
        """Publishes the value. Arrays over it stay valid but must not be written again."""
    def abort(self) -> None:
        """Discards it (refused with BufferError while arrays over it are alive)."""
    def __enter__(self) -> "Reservation": ...
    def __exit__(self, exc_type: Any, exc: Any = None, tb: Any = None) -> bool:
        """Commits on a normal exit, aborts on an exception."""

class Claim:
    """An exclusive, leased claim on one event."""

    token: str
    event: Optional[Tuple[int, int]]
    event_id: bytes
    fragment_count: int
    bytes: int
    incomplete: bool
    lease_left: float
    held: bool
    def fragments(self) -> list[Tuple[bytes, Value]]:
        """The fragments (key, value) in key order, values in place."""
    def __iter__(self) -> Iterator[Tuple[bytes, Value]]: ...
    def ack(self, how: How = "remove", durability: Optional[Durability] = None) -> None:
        """Acknowledges: REMOVE deletes the fragments atomically, KEEP keeps them."""
    def release(self) -> None:
        """Gives the event back (READY again)."""
    def __enter__(self) -> "Claim": ...
    def __exit__(self, *exc: Any) -> bool:
        """Releases the claim if still held."""

class Store:
    """An embedded store, open in this process."""

    path: str
    closed: bool
    def __init__(
        self,
        path: Union[str, PathLike[str]],
        *,
        capacity: Optional[int] = None,
        segment_size: Optional[int] = None,
        lanes: Optional[int] = None,
        layout: Optional[str] = None,
        create: bool = True,
        verify_on_read: bool = True,
        preallocate: int = 0,
        offload_to: Union[str, PathLike[str], None] = None,
        durability: Durability = "persisted",
    ) -> None: ...
    def __enter__(self) -> "Store": ...
    def __exit__(self, *exc: Any) -> bool: ...
    def close(self) -> None: ...
    def put(self, key: Key, value: Buffer, durability: Optional[Durability] = None) -> None: ...
    def get(self, key: Key) -> Optional[Value]: ...
    def get_bytes(self, key: Key) -> Optional[bytes]: ...
    def get_many(self, keys: Iterable[Key]) -> list[Optional[bytes]]: ...
    def get_into(self, key: Key, out: Buffer) -> Optional[int]: ...
    def remove(self, key: Key, durability: Optional[Durability] = None) -> bool: ...
    def contains(self, key: Key) -> bool: ...
    def __contains__(self, key: Key) -> bool: ...
    def value_len(self, key: Key) -> Optional[int]: ...
    def range(
        self, start: Optional[Key] = None, end: Optional[Key] = None, limit: int = 1000
    ) -> list[Tuple[bytes, Value]]: ...
    def keys(
        self, start: Optional[Key] = None, end: Optional[Key] = None, limit: int = 1000
    ) -> list[Tuple[bytes, int]]: ...
    def reserve(self, key: Key, nbytes: int) -> Reservation: ...
    def flush(self) -> None: ...
    def compact(self) -> int: ...
    def stats(self) -> dict[str, Any]: ...
    def set_event_policy(
        self, expected_fragments: int = 1, timeout: Optional[float] = None, run: Optional[int] = None
    ) -> None: ...
    def event_policy(self, run: Optional[int] = None) -> dict[str, Any]: ...
    def seal(self, event: Event, durability: Optional[Durability] = None) -> None: ...
    def next_event(
        self, consumer: str, lease: float = 30.0, timeout: Optional[float] = None
    ) -> Optional[Claim]: ...
    def next_event_in(
        self, group: str, consumer: str, lease: float = 30.0, timeout: Optional[float] = None
    ) -> Optional[Claim]: ...
    def ack(self, token: str, how: How = "remove", durability: Optional[Durability] = None) -> None: ...
    def release(self, token: str) -> None: ...
    def create_group(self, name: str, required: bool = True) -> None: ...
    def destroy_group(self, name: str) -> None: ...
    def groups(self) -> list[dict[str, Any]]: ...
    def consumers(self, group: str) -> list[dict[str, Any]]: ...
    def pending(self, limit: int = 100, group: Optional[str] = None) -> list[dict[str, Any]]: ...
    def set_max_deliveries(self, max: int) -> None: ...
    def event_info(self, event: Event) -> Optional[dict[str, Any]]: ...
    def events(
        self, run: int, start: int = 0, end: Optional[int] = None, limit: int = 100
    ) -> list[dict[str, Any]]: ...
    def event(self, event: Event) -> list[Tuple[bytes, Value]]: ...
    def track_events(self) -> None: ...
