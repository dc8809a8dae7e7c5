"""The KV store: interfaces in :mod:`.base`, engines beside them, picked by URL.

``memory`` (or ``memory://``) is the embedded engine; ``redis://``, ``rediss://``
and ``unix://`` URLs pick the redis engine (imported only then, so the memory
engine runs without Redis installed). An unknown scheme fails at start-up.
"""

from __future__ import annotations

from ..clock import Clock
from ..errors import ConfigError
from .base import Appended, LogPolicy, MessageLog, Notifier, Pulled, PullRequest, Store

__all__ = ["Appended", "LogPolicy", "MessageLog", "Notifier", "PullRequest", "Pulled",
           "Store", "open_store"]

_REDIS_SCHEMES = ("redis://", "rediss://", "unix://", "redis+cluster://")


def open_store(url: str, policy: LogPolicy, clock: Clock, *, node_id: str = "") -> Store:
    """Build the engine a store URL names (not yet started: call ``start()``)."""
    if url in ("memory", "memory://"):
        from .memory import MemoryStore

        return MemoryStore(policy, clock)
    if url.startswith(_REDIS_SCHEMES):
        from .redis import RedisStore

        return RedisStore(url, policy, clock, node_id=node_id)
    raise ConfigError(
        "store", f"unknown store {url!r}: use 'memory', a redis://HOST:PORT/DB URL or "
                 f"redis+cluster://HOST:PORT[,HOST:PORT...]")
