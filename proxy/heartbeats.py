"""Heartbeats, batched: every poll is a heartbeat of (room, uid) (docs/design.md step 6).

A poll only appends its uid to a list in memory. A flush task hands the lists
to the statsvr nodes every ``flush_every`` seconds (sooner when ``max_batch``
heartbeats are waiting), one ``{room: [uid, ...]}`` batch per node (as it is
to a node in this process; msgpack on the wire, ``HeartbeatSink.ingest``). Each
uid goes to the node that owns it: a stable hash of the uid over the nodes, so
a listener's heartbeats always reach the same node while the set of nodes
holds still. Nothing here touches the store.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from liveroom.clock import Clock
from liveroom.lifecycle import Periodic
from liveroom.model import name_slot
from liveroom.roles import HeartbeatSink

logger = logging.getLogger("liveroom.proxy.heartbeats")


def owner_of(uid: str, owners: int) -> int:
    """Index of the statsvr node that owns ``uid`` among ``owners`` nodes
    (:func:`~liveroom.model.name_slot`; the same in every proxy)."""
    return name_slot(uid, owners)


class Heartbeats:
    """The proxy's heartbeat batcher; start and stop it with the node."""

    def __init__(self, owners: Sequence[HeartbeatSink], clock: Clock, *,
                 flush_every: float = 0.25, max_batch: int = 8192) -> None:
        if not owners:
            raise ValueError("heartbeats need at least one statsvr node")
        self.owners = tuple(owners)
        self._clock = clock
        self.flush_every = flush_every
        self.max_batch = max_batch
        self._pending: dict[str, list[str]] = {}
        self._count = 0
        self._flusher = Periodic("proxy-heartbeats", flush_every, self._flush_async, clock,
                                 logger)

    def beat(self, room: str, uid: str) -> None:
        """Count a poll of ``uid`` in ``room``: one list append."""
        uids = self._pending.get(room)
        if uids is None:
            uids = self._pending[room] = []
        uids.append(uid)
        self._count += 1
        if self._count >= self.max_batch:
            self.flush()

    def flush(self) -> None:
        """Hand every waiting heartbeat to its owner now."""
        if not self._count:
            return
        pending, self._pending, self._count = self._pending, {}, 0
        n = len(self.owners)
        if n == 1:
            self._hand(0, pending)
            return
        split: list[dict[str, list[str]]] = [{} for _ in range(n)]
        for room, uids in pending.items():
            for uid in uids:
                split[owner_of(uid, n)].setdefault(room, []).append(uid)
        for index, part in enumerate(split):
            if part:
                self._hand(index, part)

    def _hand(self, index: int, part: dict[str, list[str]]) -> None:
        try:
            self.owners[index].take(part)
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
