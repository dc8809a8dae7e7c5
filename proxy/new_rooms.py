"""What a send may create: new rooms per uid and per node, in rate windows.

A room exists from its first accepted send, and a room costs store memory
(its log, then its series once polled): without a bound, one any-room ticket
could create thousands of rooms a second. So a send by a uid that is over
its windows of *new rooms* (``--rooms-per-uid``), or on a node over its own
(``--rooms-per-node``), may still go to a room that exists but may not
create one: the store refuses it in the same round trip as the append
(``may_create``), and the sender gets a 429 with ``Retry-After``. Sends of the
business backend (publisher or admin token) are not limited.

Limits: the counts are this node's (a uid spread over N nodes creates at most
N times its windows; room-affine routing does not change that, since every
room hashes elsewhere), and sends in flight together are counted when they
return, so a burst may pass the bound by the sends in flight.
"""

from __future__ import annotations

from collections.abc import Sequence

from liveroom.errors import RateLimited
from liveroom.ratelimit import Counts, Window, count_send, prune, refused_until, span

SWEEP_EVERY_MS = 60_000
"""How often uids whose windows all passed are forgotten."""


class NewRooms:
    """The new-room windows of one node."""

    def __init__(self, per_uid: Sequence[Window], per_node: Sequence[Window]) -> None:
        self._per_uid = tuple(per_uid)
        self._per_node = tuple(per_node)
        self._uids: dict[str, Counts] = {}
        self._node: Counts = {}
        self._swept_ms = 0

    def refusal(self, uid: str, now_ms: int) -> RateLimited | None:
        """Why a send by ``uid`` may not create a room at ``now_ms`` (the
        window that frees last), or None when it may."""
        worst: tuple[str, Window, int] | None = None
        mine = self._uids.get(uid)
        for who, counts, windows in (("node", self._node, self._per_node),
                                     (f"uid {uid}", mine, self._per_uid)):
            if counts:
                full = refused_until(counts, windows, now_ms)
                if full is not None and (worst is None or full[1] > worst[2]):
                    worst = who, *full
        if worst is None:
            return None
        who, window, free_ms = worst
        retry_after = (free_ms - now_ms) / 1000
        return RateLimited(f"{who} over {window.limit} new rooms per {span(window.seconds)}; "
                           f"sends to rooms that exist still go; retry in {retry_after:g} s",
                           retry_after=retry_after)

    def created(self, uid: str, now_ms: int) -> None:
        """A send by ``uid`` created a room at ``now_ms``."""
        if self._per_node:
            count_send(self._node, self._per_node, now_ms)
            prune(self._node, self._per_node, now_ms)
        if self._per_uid:
            counts = self._uids.setdefault(uid, {})
            count_send(counts, self._per_uid, now_ms)
            prune(counts, self._per_uid, now_ms)
        if now_ms - self._swept_ms >= SWEEP_EVERY_MS:
            self._sweep(now_ms)

    def _sweep(self, now_ms: int) -> None:
        self._swept_ms = now_ms
        for uid, counts in list(self._uids.items()):
            prune(counts, self._per_uid, now_ms)
            if not counts:
                del self._uids[uid]
