"""The KV store: interfaces in :mod:`.base`, engines beside them, picked by URL.

``memory`` (or ``memory://``) is the embedded engine (:mod:`.memory`); ``redis://``,
``rediss://``, ``unix://`` and ``redis+cluster://`` URLs pick the redis engine
(:mod:`.redis`, imported only then, so the memory
engine runs without Redis installed). An unknown scheme fails at start-up.
"""

from __future__ import annotations

from ..clock import Clock
from ..errors import ConfigError
from .base import Appended, LogPolicy, MessageLog, Notifier, Pulled, PullRequest, Store

__all__ = ["Appended", "LogPolicy", "MessageLog", "Notifier", "PullRequest", "Pulled",
           "Store", "check_store_url", "open_store"]

_REDIS_SCHEMES = ("redis://", "rediss://", "unix://", "redis+cluster://")


def check_store_url(url: str) -> None:
    """Raise :class:`~liveroom.errors.ConfigError` for a URL no engine takes,
    before anything starts (``open_store`` raises the same)."""
    if url in ("memory", "memory://"):
        return
    if url.startswith("redis+cluster://"):
        from .redis import cluster_nodes

        cluster_nodes(url)
        return
    if url.startswith(_REDIS_SCHEMES):
        from redis.connection import parse_url

        try:
            parse_url(url)  # type: ignore[no-untyped-call]
        except ValueError as exc:
            raise ConfigError("store", f"bad store URL {url!r}: {exc}") from None
        return
    raise _unknown(url)


def _unknown(url: str) -> ConfigError:
    return ConfigError(
        "store", f"unknown store {url!r}: use 'memory', a redis://HOST:PORT/DB URL or "
                 f"redis+cluster://HOST:PORT[,HOST:PORT...]")


def open_store(url: str, policy: LogPolicy, clock: Clock, *, node_id: str = "") -> Store:
    """Build the engine a store URL names (not yet started: call ``start()``)."""
    if url in ("memory", "memory://"):
        from .memory import MemoryStore

        return MemoryStore(policy, clock)
    if url.startswith(_REDIS_SCHEMES):
        from .redis import RedisStore

        return RedisStore(url, policy, clock, node_id=node_id)
    raise _unknown(url)
