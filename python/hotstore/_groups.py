"""The dicts of ``Store.groups()`` (the embedded binding)."""

from __future__ import annotations

from typing import Any, Dict


class GroupInfo(dict):
    """One consumer group: a dict with the fields of the server's ``EVENT.GROUPS``, the same
    keys as ``hotstore.Client.groups()`` gives: ``name``, ``required`` (bool), ``consumers``,
    ``pending``, ``lag``, ``poisoned``, ``delivered``, ``acked``, ``oldest-waiting-ms`` and
    ``oldest-pending-ms`` (-1: none).

    The embedded binding's former names still answer ``g[name]`` and ``g.get(name)``, though
    they are not among the keys: ``delivered_total``, ``acked_total``, ``oldest_waiting`` and
    ``oldest_pending`` (seconds, None: none), and the engine's ``id`` and
    ``leases_expired_total``, which the server does not report.
    """

    __slots__ = ("_old",)

    def __init__(self, fields: Dict[str, Any], old: Dict[str, Any]):
        super().__init__(fields)
        self._old = old

    def __missing__(self, key: Any) -> Any:
        try:
            return self._old[key]
        except (KeyError, TypeError):
            raise KeyError(key) from None

    def get(self, key: Any, default: Any = None) -> Any:
        if key in self:
            return self[key]
        return self._old.get(key, default)

    def __reduce__(self) -> Any:
        return (GroupInfo, (dict(self), dict(self._old)))
