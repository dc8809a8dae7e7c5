"""What operators change, on Redis: the rooms' sect records, the start and the
end of broadcasts.

- **Sect records** are one hash, :data:`.keys.VIP_RECORDS` (room to record),
  beside the whitelist, one set, :data:`.keys.VIP` (the vip rooms, kept in
  step with the records by ``lua/operators_vip.lua``'s compare-and-swap; a room in the
  set with no record was whitelisted by an older version). Both under the
  global tag; nodes read them every ``--vip-refresh``, never per poll.
- **Starting a broadcast** is one script, ``lua/operators_start_broadcast.lua``: the room's log
  if it has none, and the ``live`` mark that keeps it while it is read.
- **Ending a broadcast** is one script, ``lua/operators_end_broadcast.lua``: a new
  epoch and an empty log, the next broadcast number in ``lr:{R}:bc``, the viewers history
  renamed aside as ``vx:<n>``, ``vm:<n>``, ``vh:<n>`` and kept ``ttl_ms``
  (``vm:<n>`` with the broadcast's likes and gift totals, beside its top
  givers renamed to ``gr:<n>`` and its moderation audit to ``aud:<n>``;
  the next broadcast's counters and audit start empty), the record of when
  it ended, and the notify. The renamed keys are named by the
  ended number, which the caller reads first (a Redis Cluster needs every key a
  script touches declared): the script refuses when another end came in
  between, and the call reads again. Two round trips, three the first time the
  script runs on a fresh server.
- **Ended broadcasts** are read with plain pipelined commands: the record in
  ``bc``, then each kept history. One whose ``vm:<n>`` expired (Redis's own
  clock) is left out; the record is pruned on the caller's clock by the next
  end.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...errors import StoreUnavailable
from ..base import (
    OUTBOX_MAX,
    RANKING_KEPT,
    Ended,
    LogPolicy,
    MessageLog,
    PastBroadcast,
    Started,
    VipSwap,
    new_epoch,
)
from . import keys
from .calls import Client, Lua, run_scripts, text, unavailable
from .counters import top_of
from .moderation import unpack_audit
from .stats import viewers_state

_END_ATTEMPTS = 5
"""Ends of one room racing each other: tries before giving up."""


class RedisOperators:
    """:class:`~liveroom.store.base.Operators` on Redis (keys in :mod:`.keys`)."""

    def __init__(self, client: Client, policy: LogPolicy, log: MessageLog, *,
                 sharded: bool = False) -> None:
        self._client = client
        self._sharded = sharded
        self._policy = policy
        self._log = log
        self._end = Lua("operators_end_broadcast.lua", uses=["log_new.lua", "room_event_fn.lua"])
        self._start = Lua("operators_start_broadcast.lua",
                          uses=["log_new.lua", "room_event_fn.lua"])
        self._vip = Lua("operators_vip.lua")

    # -- the vip whitelist ---------------------------------------------------------

    async def vip_records(self) -> dict[str, bytes]:
        """One pipeline: the records, and the whitelist for the rooms an
        older version put there without one."""
        with unavailable("reading the vip records"):
            async with self._client.pipeline(transaction=False) as pipe:
                pipe.hgetall(keys.VIP_RECORDS)
                pipe.smembers(keys.VIP)
                records, whitelist = await pipe.execute()
        found = {text(room): bytes(record) for room, record in records.items()}
        for room in whitelist:
            found.setdefault(text(room), b"")
        return found

    async def vip_swap(self, swaps: Sequence[VipSwap]) -> list[bool]:
        """One script call (``lua/operators_vip.lua``) for all of them."""
        if not swaps:
            return []
        args: list[str | bytes | int] = [OUTBOX_MAX]
        for swap in swaps:
            args += (swap.room, swap.before, swap.after, int(swap.vip), swap.event_id,
                     swap.event)
        with unavailable("changing the vip records"):
            (applied,) = await run_scripts(self._client, [(
                self._vip, [keys.VIP, keys.VIP_RECORDS, keys.WEBHOOKS], args)])
        return [bool(a) for a in applied]

    # -- broadcasts ------------------------------------------------------------------

    async def start_broadcast(self, room: str, *, event: bytes | None = None) -> Started:
        """One script call (``lua/operators_start_broadcast.lua``)."""
        with unavailable("starting a broadcast"):
            ((epoch, broadcast, created),) = await run_scripts(self._client, [(
                self._start,
                [keys.meta(room), keys.log(room), keys.important(room),
                 keys.broadcasts(room), keys.personal(room), keys.ordinals(room),
                 keys.events(room)],
                [new_epoch(), self._policy.room_ttl_ms,
                 keys.notify_how(room, sharded=self._sharded), room, event or b""])])
        return Started(text(epoch), int(broadcast), bool(created))

    async def end_broadcast(self, room: str, now_ms: int, ttl_ms: int, *,
                            event: bytes | None = None) -> Ended:
        """Read the current broadcast, then end it in one script call."""
        for _ in range(_END_ATTEMPTS):
            with unavailable("ending a broadcast"):
                current = int(await self._client.hget(
                    keys.broadcasts(room), "n") or 1)
                ((epoch, broadcast),) = await run_scripts(self._client, [(
                    self._end,
                    [keys.meta(room), keys.log(room), keys.important(room),
                     keys.broadcasts(room),
                     keys.viewers_exact(room), keys.viewers_meta(room),
                     keys.viewers_sketches(room),
                     keys.viewers_exact(room, current), keys.viewers_meta(room, current),
                     keys.viewers_sketches(room, current),
                     keys.personal(room), keys.ordinals(room),
                     keys.likes(room), keys.givers(room), keys.gifts(room),
                     keys.givers(room, current), keys.audit(room), keys.audit(room, current),
                     keys.events(room)],
                    [current, new_epoch(), now_ms, ttl_ms, self._policy.room_ttl_ms,
                     keys.notify_how(room, sharded=self._sharded), room, RANKING_KEPT,
                     event or b""])])
            if broadcast:
                return Ended(text(epoch), int(broadcast))
        raise StoreUnavailable(f"room {room}'s broadcast kept ending meanwhile; try again")

    async def broadcasts(self, room: str) -> list[PastBroadcast]:
        """Two round trips: the record, then the kept histories in one pipeline."""
        with unavailable("reading past broadcasts"):
            record = await self._client.hgetall(keys.broadcasts(room))
        ended = sorted(((int(field[2:]), int(value.split()[0]))
                        for field, value in ((text(f), text(v)) for f, v in record.items())
                        if field.startswith("e:")),
                       reverse=True)
        if not ended:
            return []
        with unavailable("reading past broadcasts"):
            async with self._client.pipeline(transaction=False) as pipe:
                for n, _ in ended:
                    pipe.scard(keys.viewers_exact(room, n))
                    pipe.hgetall(keys.viewers_meta(room, n))
                    pipe.hgetall(keys.viewers_sketches(room, n))
                    pipe.zrevrange(keys.givers(room, n), 0, RANKING_KEPT - 1,
                                   withscores=True, score_cast_func=bytes)
                    pipe.lrange(keys.audit(room, n), 0, -1)
                replies: list[Any] = await pipe.execute()
        past = []
        for i, (n, ended_ms) in enumerate(ended):
            exact, meta, by_node, top, audit = replies[5 * i:5 * i + 5]
            if meta:  # else expired: vm:<n> lives exactly as long as it is kept
                # An archive of before the counters has no likes nor gifts,
                # one of before moderation no audit.
                past.append(PastBroadcast(
                    n, ended_ms, viewers_state(exact, meta.get(b"complete"), by_node, n),
                    int(meta.get(b"likes", 0)), int(meta.get(b"gifts", 0)), top_of(top),
                    unpack_audit(audit)))
        return past
