"""Senders over their rate limits, remembered by the node: the send hook's
peek at the limits before it calls the backend.

The rate windows are counted in the store, inside the append
(:mod:`liveroom.ratelimit`): a node learns that a sender is over them only
when an append is refused (429, with when its windows free). With the send
hook on, each send costs a call to the backend before its append, so a
sender hammering past its limits would cost the backend one verdict per
refused send. :class:`LimitedSenders` remembers each refusal until the
windows it named free: a send of that sender in that room, under the same
windows, is refused (429) at once, before the hook, as the store would
refuse it.

Limits: it is a node's memory (another node learns on its own first
refusal), a hint that never refuses what the store would take (counts in a
window only grow until it frees; a change of the windows themselves, slow
mode lifted say, forgets the refusal), and bounded (:data:`REMEMBERED_MAX`
senders; past them the expired go, then all: the peek is lost, never a send).
"""

from __future__ import annotations

from typing import Final

from liveroom.errors import RateLimited
from liveroom.ratelimit import RateLimits

REMEMBERED_MAX: Final = 100_000
"""Refused senders a node remembers at once (about 200 bytes each)."""


class LimitedSenders:
    """Recent refusals by room and uid, until their windows free."""

    def __init__(self, remembered_max: int = REMEMBERED_MAX) -> None:
        self._until: dict[tuple[str, str], tuple[int, RateLimits]] = {}
        self._max = remembered_max

    def __len__(self) -> int:
        return len(self._until)

    def refused(self, room: str, uid: str, limits: RateLimits, now_ms: int,
                retry_after: float | None) -> None:
        """The store refused ``uid``'s send to ``room`` under ``limits`` at
        ``now_ms``, its windows free in ``retry_after`` seconds."""
        if not retry_after or retry_after <= 0:
            return
        kept = self._until
        if len(kept) >= self._max:
            for key in [k for k, (until, _) in kept.items() if until <= now_ms]:
                del kept[key]
            if len(kept) >= self._max:
                kept.clear()
        kept[room, uid] = (now_ms + int(retry_after * 1000), limits)

    def check(self, room: str, uid: str, limits: RateLimits | None, now_ms: int) -> None:
        """Raise the 429 the store would answer when ``uid`` was refused in
        ``room`` under the same ``limits`` and its windows have not freed."""
        if limits is None:
            return
        kept = self._until.get((room, uid))
        if kept is None:
            return
        until, windows = kept
        if until <= now_ms or windows != limits:
            del self._until[room, uid]
            return
        retry_after = (until - now_ms) / 1000
        raise RateLimited(f"uid {uid} over its send limits in room {room}; retry in "
                          f"{retry_after:g} s", retry_after=retry_after)
