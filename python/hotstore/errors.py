"""Exceptions of the embedded store: one class per variant of the engine's ``hotstore::Error``
(crates/hotstore/src/error.rs), all subclasses of :class:`HotstoreError`. Bad arguments are
also ``ValueError``; I/O failures also ``OSError``. The message is the engine's: it says what
happened and, where there is one, what to do.
"""

from __future__ import annotations

__all__ = [
    "HotstoreError",
    "StoreIOError",
    "ChecksumMismatch",
    "Corruption",
    "MissingFiles",
    "MissingMeta",
    "StoreFull",
    "KeyTooLarge",
    "EmptyKey",
    "ValueTooLarge",
    "LayoutMismatch",
    "FormatVersion",
    "BadMetadata",
    "NoStore",
    "NoStoreDirectory",
    "NotADirectory",
    "StoreLocked",
    "InvalidOption",
    "InvalidLayout",
    "Poisoned",
    "LateFragment",
    "ClaimLost",
    "NoSuchEvent",
    "EventAcknowledged",
    "NoSuchGroup",
    "InvalidArgument",
    "StoreClosed",
    "ReservationOpen",
]


class HotstoreError(Exception):
    """Base class of every error the embedded store raises."""


class StoreIOError(HotstoreError, OSError):
    """An operating-system call failed (``Error::Io``)."""


class ChecksumMismatch(HotstoreError):
    """A record's checksum does not match its bytes: it is damaged (``Error::ChecksumMismatch``).
    Also raised for a value changed through an array after its reservation was committed."""


class Corruption(HotstoreError):
    """Damage found at open that is not a torn tail (``Error::Corruption``)."""


class MissingFiles(HotstoreError):
    """Segment files the store lists are gone (``Error::MissingFiles``)."""


class MissingMeta(HotstoreError):
    """The metadata file is gone but segment files are there (``Error::MissingMeta``)."""


class StoreFull(HotstoreError):
    """No tier has room for the write; nothing stored was touched (``Error::StoreFull``)."""


class KeyTooLarge(HotstoreError, ValueError):
    """Key longer than ``hotstore.MAX_KEY_LEN`` (``Error::KeyTooLarge``)."""


class EmptyKey(HotstoreError, ValueError):
    """Keys must be 1 byte or longer (``Error::EmptyKey``)."""


class ValueTooLarge(HotstoreError, ValueError):
    """Value longer than ``hotstore.MAX_VALUE_LEN`` (``Error::ValueTooLarge``)."""


class LayoutMismatch(HotstoreError):
    """The store was created with another key layout (``Error::LayoutMismatch``)."""


class FormatVersion(HotstoreError):
    """A file has a format version this build cannot read (``Error::FormatVersion``)."""


class BadMetadata(HotstoreError):
    """The metadata file is unreadable (``Error::BadMetadata``)."""


class NoStore(HotstoreError):
    """The directory holds no store and ``create=False`` (``Error::NoStore``)."""


class NoStoreDirectory(HotstoreError, FileNotFoundError):
    """The store directory does not exist and ``create=False`` (``Error::NoStoreDirectory``)."""


class NotADirectory(HotstoreError, NotADirectoryError):
    """The store path is a file (``Error::NotADirectory``)."""


class StoreLocked(HotstoreError):
    """Another process (or another open Store, or values of a closed one still alive, in this
    process) holds the store open (``Error::Locked``)."""


class InvalidOption(HotstoreError, ValueError):
    """An option is out of its documented bounds (``Error::InvalidOption``)."""


class InvalidLayout(HotstoreError, ValueError):
    """A key layout description could not be parsed (``Error::InvalidLayout``)."""


class Poisoned(HotstoreError):
    """A persist failed earlier; the store refuses writes until reopened (``Error::Poisoned``)."""


class LateFragment(HotstoreError):
    """A fragment arrived for an acknowledged event: not stored (``Error::LateFragment``)."""


class ClaimLost(HotstoreError):
    """The claim is no longer held: lease expired or released (``Error::ClaimLost``)."""


class NoSuchEvent(HotstoreError):
    """No event with this id holds fragments (``Error::NoSuchEvent``)."""


class EventAcknowledged(HotstoreError):
    """The event was already acknowledged (``Error::EventAcknowledged``)."""


class NoSuchGroup(HotstoreError):
    """No consumer group has this name (``Error::NoSuchGroup``)."""


class InvalidArgument(HotstoreError, ValueError):
    """A bad argument: a reservation misused, a buffer of the wrong size or dtype, an unknown
    durability ... (``Error::InvalidArgument``, and the binding's own checks)."""


class StoreClosed(HotstoreError, ValueError):
    """The Store (or the store of a Claim) was closed. Not an engine error: the binding's."""


class ReservationOpen(InvalidArgument):
    """A write on a thread that holds an open reservation (it would wait for the reservation's
    writer lane, forever), or close() with reservations open. Not an engine error: the
    binding's."""
