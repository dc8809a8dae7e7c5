"""Heartbeats, batched: every poll is a heartbeat of (room, uid) (docs/design.md step 6).

A poll only appends its uid to a list in memory: one of two, as the poll says
whether the heartbeat is *trusted* (its uid a ticket's, or the poll came back
with the signed ``ctx`` the node gave it: :mod:`.poll` decides, at no cost
here). Trusted members are the only ones the automatic vip rule counts; the
online figure counts everyone. A flush task hands the lists to the statsvr
nodes every ``heartbeat_flush`` seconds (sooner when ``max_batch`` heartbeats are
waiting), one pair of ``{room: [uid, ...]}`` maps per node, the heartbeats
and the trusted ones (as they are to a node in this process; msgpack on the
wire, ``HeartbeatSink.ingest``). Each uid goes to the node that owns it: a
stable hash of the uid over the nodes, so a listener's heartbeats always
reach the same node while the set of nodes holds still. Nothing here touches
the store.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Final

from liveroom.clock import Clock
from liveroom.lifecycle import Periodic
from liveroom.model import name_slot
from liveroom.roles import HeartbeatSink
from liveroom.settings import DEFAULTS

logger: Final = logging.getLogger("liveroom.proxy.heartbeats")

Batch = dict[str, list[str]]
"""``{room: [uid, ...]}``: heartbeats waiting, or handed to one node."""


def owner_of(uid: str, owners: int) -> int:
    """Index of the statsvr node that owns ``uid`` among ``owners`` nodes
    (:func:`~liveroom.model.name_slot`; the same in every proxy)."""
    return name_slot(uid, owners)


class Heartbeats:
    """The proxy's heartbeat batcher; start and stop it with the node."""

    def __init__(self, owners: Sequence[HeartbeatSink], clock: Clock, *,
                 heartbeat_flush: float = DEFAULTS.heartbeat_flush, max_batch: int = 8192) -> None:
        if not owners:
            raise ValueError("heartbeats need at least one statsvr node")
        self.owners = tuple(owners)
        self._clock = clock
        self.heartbeat_flush = heartbeat_flush
        self.max_batch = max_batch
        self._pending: Batch = {}
        self._trusted: Batch = {}
        self._count = 0
        self._flusher = Periodic("proxy-heartbeats", heartbeat_flush, self._flush_async, clock,
                                 logger)

    def beat(self, room: str, uid: str, trusted: bool = False) -> None:
        """Count a poll of ``uid`` in ``room`` (``trusted``: one the vip rule
        may count): one list append."""
        pending = self._trusted if trusted else self._pending
        uids = pending.get(room)
        if uids is None:
            uids = pending[room] = []
        uids.append(uid)
        self._count += 1
        if self._count >= self.max_batch:
            self.flush()

    def flush(self) -> None:
        """Hand every waiting heartbeat to its owner now."""
        if not self._count:
            return
        pending, trusted = self._pending, self._trusted
        self._pending, self._trusted, self._count = {}, {}, 0
        n = len(self.owners)
        if n == 1:
            self._hand(0, pending, trusted)
            return
        parts, vouched = _split(pending, n), _split(trusted, n)
        for index in range(n):
            if parts[index] or vouched[index]:
                self._hand(index, parts[index], vouched[index])

    def _hand(self, index: int, part: Batch, trusted: Batch) -> None:
        try:
            self.owners[index].take(part, trusted)
        except Exception:
            # A statsvr failing must not fail polls: its members age out.
            logger.exception("statsvr node %d refused a heartbeat batch", index)

    async def start(self) -> None:
        self._flusher.start()

    async def stop(self) -> None:
        await self._flusher.stop()
        self.flush()

    async def _flush_async(self) -> None:
        self.flush()


def _split(pending: Batch, n: int) -> list[Batch]:
    """``pending`` split over ``n`` owners by :func:`owner_of`."""
    split: list[Batch] = [{} for _ in range(n)]
    for room, uids in pending.items():
        for uid in uids:
            split[owner_of(uid, n)].setdefault(room, []).append(uid)
    return split
