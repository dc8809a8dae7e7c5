"""The KV store's interfaces: what every engine promises.

Two engines implement them side by side: :mod:`.memory` (the embedded default,
one process) and :mod:`.redis` (many processes and hosts, Redis or Redis
Cluster). One contract test suite (``tests/test_store_contract.py``) runs against
both, so the memory engine is a faithful stand-in.

Every method may raise :class:`~liveroom.errors.StoreUnavailable` and nothing
else from the driver.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from ..model import Entry, NewMessage


def new_epoch() -> str:
    """A fresh opaque epoch: random, so a lost and restarted log never repeats one."""
    return secrets.token_urlsafe(9)


@dataclass(frozen=True, slots=True)
class LogPolicy:
    """How much of a room's log the store keeps, and for how long."""

    log_cap: int = 10_000
    """Messages kept per room log (the newest; older ones are trimmed)."""
    important_keep: int = 500
    important_window_ms: int = 600_000
    """Important messages are kept while among the newest ``important_keep`` *or*
    younger than this, beyond ``log_cap`` (bounded by ``important_hard_cap``)."""
    important_hard_cap: int = 50_000
    room_ttl_ms: int = 86_400_000
    """A room with no send and no read for this long expires."""
    dedup_ttl_ms: int = 600_000
    """How long a ``client_msg_id`` is remembered."""


@dataclass(frozen=True, slots=True)
class Appended:
    epoch: str
    seq: int
    duplicate: bool
    """True when the ``client_msg_id`` was seen: nothing was stored."""


@dataclass(frozen=True, slots=True)
class PullRequest:
    room: str
    after: int
    """Return entries with a seq greater than this."""
    limit: int
    """At most this many of the newest log entries (important ones beyond it
    are still returned while the store retains them)."""


@dataclass(frozen=True, slots=True)
class Pulled:
    """A room's log after a position, as one read of the store saw it."""

    room: str
    epoch: str | None
    """``None`` when the room has no log (never written, expired or lost)."""
    head: int
    head_ic: int
    entries: tuple[Entry, ...]
    """Ascending seq, all after the request's ``after``: the newest ``limit``
    log entries, plus every retained important entry after ``after``."""
    complete: bool
    """True when no entry in ``(after, head]`` is missing from ``entries``."""


class MessageLog(Protocol):
    """One log per room with a dense ``seq`` and an opaque ``epoch``.

    - ``append`` is atomic and one round trip: client_msg_id dedup, next seq,
      the entry (with its important count ``ic``), retention of important
      entries, expiry refresh, and the notify to every recvsvr.
    - A room's ``epoch`` changes when its log was lost (a store restarted empty,
      expiry) and on :meth:`renew_epoch`; seqs restart from 1 in a new epoch
      only when the log was lost.
    - ``pull`` only reads.
    """

    async def open_room(self, room: str) -> str:
        """The room's epoch, creating an empty log if it has none."""

    async def append(self, room: str, message: NewMessage) -> Appended:
        """Store one message and notify; a seen ``client_msg_id`` stores nothing."""

    async def pull(self, requests: Sequence[PullRequest]) -> list[Pulled]:
        """Read several rooms in one batch (one round trip on Redis)."""

    async def renew_epoch(self, room: str, stale: str) -> str:
        """Give the room a new epoch if it is still ``stale``; return the current one."""

    async def touch(self, rooms: Sequence[str]) -> None:
        """Count a read of these rooms: push their expiry back."""


OnNotify = Callable[[str, int], None]
"""Called with (room, seq) when a room reached seq."""
OnResync = Callable[[], None]
"""Called when notifies may have been lost (after the channel reconnected)."""


class Notifier(Protocol):
    """At-most-once hints "room R reached seq N" to every recvsvr of the system.

    A notify is only a hint: losing one never loses a message (recvsvr's
    fallback pull covers it). The channel reconnects by itself and calls every
    ``on_resync`` after it did, since notifies sent meanwhile are gone.
    """

    def subscribe(self, on_notify: OnNotify, on_resync: OnResync) -> None: ...

    @property
    def alive(self) -> bool:
        """Whether the channel is connected and answered its last probe."""


class Store(Protocol):
    """An engine: the message log, the notifier and shared values, with a lifecycle."""

    name: str

    # Read-only members, so an engine may declare its own concrete classes.
    @property
    def log(self) -> MessageLog: ...

    @property
    def notifier(self) -> Notifier: ...

    async def start(self) -> None:
        """Connect and start background tasks (notify listener, probes, expiry)."""

    async def close(self) -> None:
        """Stop background tasks and disconnect."""

    async def ping(self) -> None:
        """Raise StoreUnavailable unless the store answers now."""

    async def shared_value(self, name: str, candidate: str) -> str:
        """A value every node over this store agrees on: the first one set wins.

        Used for tokens and the context secret when they are not configured.
        """
