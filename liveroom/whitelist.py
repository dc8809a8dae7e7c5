"""The node's copy of the rooms' sects, and the automatic vip rule it applies.

Every room's sect record (:mod:`liveroom.sects`) is kept in the store
(``Operators.vip_records``); every node keeps them in memory and rereads them
in a background task every ``vip_refresh`` seconds of the node's clock. Nothing on
a poll's path reads the store: :meth:`VipList.is_vip` is a set lookup.

**The rule.** After each reread, a node with a rule (``--auto-vip on``)
observes the merged *trusted* count of the rooms it knows (those merged here
at or above the promote threshold, and every room with a record the rule
still watches: an automatic vip room, a candidate) and swaps in the records that
change (``Operators.vip_swap``: compare-and-swap). Every node may do it; the
swap makes each decision once: of two nodes deciding together one wins, the
other reads the winner's record next time. The node whose swap moved a room
counts the move (``liveroom_vip_moves``) and logs it; every node moves the
room between its sects when it reads the new record.

**Whom it counts.** The trusted count is the room's online count less the
listeners nobody vouched for: in ``ticket`` mode every listener is trusted; in
open mode a uid counts once it came back on a poll with the signed ``ctx`` the
node gave it (:meth:`proxy.polls.poll.Poll.trusted`, kept by statsvr until the
listener leaves), so a client making up uids by the hundred moves no room with
first polls. The online figure shown to users and in the API counts everyone.

Limits and trade-offs:

* **Staleness.** A move made elsewhere shows here within one refresh period
  (plus a store round trip). A change made through this node is noted at once
  (:meth:`VipList.note`), and a reread that was already in flight when it was
  noted is discarded so it cannot undo the change.
* **Time.** Thresholds are timed on the deciding node's clock (``since`` and
  the candidate's start are its milliseconds): nodes' clocks should agree to
  well within ``--vip-promote-after``.
* **Outages.** While the store is down the last records read stay in force and
  nothing moves; the outage is logged once when it starts and once when it ends.
* **Start-up.** :meth:`VipList.start` reads the records before the node
  listens, retrying for at most ``start_wait`` seconds of real time (the node's
  clock may be a test's fake one that nobody moves yet); past that the node
  starts with every room in the normal sect and the refresh task keeps trying.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from . import sects
from .clock import Clock
from .errors import StoreUnavailable
from .events import NO_EVENTS, Events
from .lifecycle import Outage, Periodic
from .metrics import Metrics
from .sects import NONE, Sect, VipRecord, VipRule, decode, encode, forgotten, observe
from .settings import DEFAULTS
from .store.base import MessageLog, Operators, VipSwap

logger = logging.getLogger("liveroom.whitelist")

OnChange = Callable[[frozenset[str]], None]
"""Called with the rooms that entered or left the vip sect."""
Merged = Callable[[], Iterable[tuple[str, int]]]
"""The rooms merged on this node, each with its trusted count (the members
the rule counts, see the module docstring)."""
Trusted = Callable[[str], "int | None"]
"""A room's merged trusted count, ``None`` until this node merged it (asking
starts its merge)."""

SWAP_ATTEMPTS = 5
"""An operator's change that keeps finding the record changed gives up after this."""


@dataclass(frozen=True, slots=True)
class SectChange:
    """What an operator's call did to a room's record."""

    room: str
    before: VipRecord
    after: VipRecord
    stored: bytes
    """``after`` as stored (``b""``: no record)."""

    @property
    def moved(self) -> bool:
        return self.before.vip != self.after.vip


def sect_event(record: VipRecord, reason: str) -> dict[str, object]:
    """The fields of a ``room.sect_changed`` event: the room's sect now, and
    why it moved (``auto``: the rule; ``pin``, ``operator``: an operator)."""
    return {"sect": "vip" if record.vip else "normal", "reason": reason}


def _decoded(room: str, raw: bytes) -> VipRecord:
    try:
        return decode(raw)
    except ValueError:
        logger.warning("room %s: unreadable vip record %r, taken as normal", room, raw[:80])
        return NONE


def sect_swap(events: Events, room: str, raw: bytes, stored: bytes, before: VipRecord,
              after: VipRecord, reason: str) -> VipSwap:
    """The swap of ``room``'s record ``raw`` for ``stored`` (``after``), with
    its ``room.sect_changed`` event when the room moves between sects (the
    swap's store step writes it, if it applies)."""
    made = events.made("room.sect_changed", room, **sect_event(after, reason)) \
        if before.vip != after.vip else None
    if made is None:
        return VipSwap(room, raw, stored, after.vip)
    return VipSwap(room, raw, stored, after.vip, made[0], made[1])


async def change_sect(operators: Operators, room: str,
                      step: Callable[[VipRecord], VipRecord], *,
                      events: Events = NO_EVENTS) -> SectChange:
    """Apply ``step`` (a pin, an unpin, a release: :mod:`liveroom.sects`) to
    ``room``'s record in the store: read, decide, swap, again if another node
    changed the record meanwhile; a move between sects writes its
    ``room.sect_changed`` to ``events``' outbox with the swap. Raises
    ``StoreUnavailable`` when the store is down, or the record kept changing."""
    for _ in range(SWAP_ATTEMPTS):
        records = await operators.vip_records()
        raw = records.get(room)
        before = NONE if raw is None else _decoded(room, raw)
        after = step(before)
        if after == before:
            return SectChange(room, before, after, raw or b"")
        stored = encode(after)
        swap = sect_swap(events, room, raw or b"", stored, before, after,
                         after.reason or "operator")
        (applied,) = await operators.vip_swap([swap])
        if applied:
            events.written(["room.sect_changed"] if swap.event else [])
            return SectChange(room, before, after, stored)
    raise StoreUnavailable(f"room {room}'s sect kept changing meanwhile; try again")


async def pin_room(operators: Operators, log: MessageLog, room: str, sect: Sect | None,
                   now_ms: int, *, events: Events = NO_EVENTS) -> SectChange:
    """An operator's pin of ``room`` to ``sect`` (``None``: unpin), as the API
    and the CLI make it. A room pinned to vip is opened first: an operator
    action makes the room exist (an empty log that lives ``--empty-room-ttl``
    until its first message)."""
    if sect == "vip":
        await log.open_room(room)
    return await change_sect(operators, room, lambda r: sects.pin(r, sect, now_ms),
                             events=events)


async def release_room(operators: Operators, room: str, now_ms: int, *,
                       events: Events = NO_EVENTS) -> SectChange:
    """An operator's ``vip remove``: unpinned, and to the normal sect now."""
    return await change_sect(operators, room, lambda r: sects.released(r, now_ms),
                             events=events)


async def read_sects(operators: Operators) -> dict[str, VipRecord]:
    """Every room's record (rooms with none are normal and not listed)."""
    return {room: _decoded(room, raw) for room, raw in (await operators.vip_records()).items()}


class VipList:
    """The rooms' sects as this node knows them, refreshed in the background,
    and the automatic rule (``rule``; ``None``: off)."""

    def __init__(self, operators: Operators, clock: Clock, *,
                 vip_refresh: float = DEFAULTS.vip_refresh, start_wait: float = 5.0,
                 rule: VipRule | None = None, metrics: Metrics | None = None,
                 events: Events = NO_EVENTS) -> None:
        if vip_refresh <= 0:
            raise ValueError("the vip refresh period must be positive")
        self._operators = operators
        self._clock = clock
        self._start_wait = start_wait
        self.rule = rule
        self._metrics = metrics
        self._events = events
        self._listeners: list[OnChange] = []
        self._merged: Merged = lambda: ()
        self._trusted: Trusted = lambda room: None
        self._refresher = Periodic("vip-refresh", vip_refresh, self.refresh, clock, logger)
        self._noted = 0
        """Changes noted locally: a reread started before the last one is stale."""
        self._outage = Outage(logger)
        self._raw: dict[str, bytes] = {}
        self.records: dict[str, VipRecord] = {}
        """Every room with a record, as last read or changed here."""
        self.rooms: frozenset[str] = frozenset()
        """The rooms in the vip sect."""
        self.version = 0
        """Goes up by one every time the vip rooms change."""

    # -- reading ------------------------------------------------------------------

    def is_vip(self, room: str) -> bool:
        return room in self.rooms

    def on_change(self, listener: OnChange) -> None:
        """Call ``listener`` with the rooms that changed sect, right after every change."""
        self._listeners.append(listener)

    def observe(self, merged: Merged, trusted: Trusted) -> None:
        """Where the rule reads trusted counts (the node's statsvr)."""
        self._merged = merged
        self._trusted = trusted

    # -- changing -----------------------------------------------------------------

    def note(self, change: SectChange) -> None:
        """Apply a change this node made in the store (no store call)."""
        self._noted += 1
        self._set(change.room, change.stored, change.after)
        if change.moved and change.after.reason is not None:
            self._moved(change.room, change.after, change.after.reason)
        self._publish()

    def _set(self, room: str, raw: bytes, record: VipRecord) -> None:
        if record == NONE:
            self._raw.pop(room, None)
            self.records.pop(room, None)
        else:
            self._raw[room] = raw
            self.records[room] = record

    def _publish(self) -> None:
        rooms = frozenset(room for room, record in self.records.items() if record.vip)
        changed = rooms ^ self.rooms
        if not changed:
            return
        self.rooms = rooms
        self.version += 1
        for listener in self._listeners:
            try:
                listener(changed)
            except Exception:  # one listener failing must not stop the others
                logger.exception("a vip sect listener failed")

    def _moved(self, room: str, record: VipRecord, reason: str) -> None:
        direction = "to_vip" if record.vip else "to_normal"
        if self._metrics is not None:
            self._metrics.vip_moves.labels(direction, reason).inc()
        logger.info("room %s moved to the %s sect (%s)", room,
                    "vip" if record.vip else "normal", reason)

    async def refresh(self, *, decide: bool = True) -> bool:
        """Read the records from the store once, then apply the rule (unless
        ``decide`` is False); False if the store is down (the records stay as
        they were)."""
        noted = self._noted
        try:
            raw = await self._operators.vip_records()
        except StoreUnavailable as exc:
            self._outage.failed("cannot read the vip records, keeping the last ones "
                                "(%d vip rooms): %s", len(self.rooms), exc.message)
            return False
        if noted == self._noted:
            # Only records whose bytes changed are decoded again (an unreadable
            # one is then reported once, not every refresh).
            kept, known = self._raw, self.records
            self.records = {room: known[room] if kept.get(room) == data and room in known
                            else _decoded(room, data) for room, data in raw.items()}
            self._raw = dict(raw)
            self._publish()
        self._outage.worked("vip records read again (%d vip rooms)", len(self.rooms))
        if decide and self.rule is not None:
            try:
                await self.decide()
            except StoreUnavailable as exc:
                self._outage.failed("cannot store the vip rule's decisions: %s", exc.message)
                return False
        return True

    async def decide(self) -> list[str]:
        """Apply the rule to the rooms it watches and swap in what changed;
        return the rooms this node moved."""
        rule = self.rule
        if rule is None:
            return []
        now_ms = int(self._clock.time() * 1000)
        seen: dict[str, int] = {room: trusted for room, trusted in self._merged()
                                if trusted >= rule.promote or room in self.records}
        for room, record in self.records.items():
            if room not in seen and record.pinned is None and \
                    (record.vip or record.candidate_ms is not None):
                trusted = self._trusted(room)
                if trusted is not None:
                    seen[room] = trusted
        swaps: list[tuple[VipSwap, VipRecord]] = []
        for room in {*seen, *self.records}:
            before = self.records.get(room, NONE)
            trusted = seen.get(room)
            after = before if trusted is None else observe(before, trusted, now_ms, rule)
            if forgotten(after, now_ms):
                after = NONE
            if after != before:
                swaps.append((sect_swap(self._events, room, self._raw.get(room, b""),
                                        encode(after), before, after, "auto"), after))
        if not swaps:
            return []
        noted = self._noted
        applied = await self._operators.vip_swap([swap for swap, _ in swaps])
        moved: list[str] = []
        for (swap, after), ok in zip(swaps, applied, strict=True):
            if not ok:
                continue  # another node decided first: its record is read next time
            before = self.records.get(swap.room, NONE)
            if noted == self._noted:
                self._set(swap.room, swap.after, after)
            if before.vip != after.vip:
                moved.append(swap.room)
                self._moved(swap.room, after, "auto")
        self._publish()
        self._events.written(["room.sect_changed"
                              for (swap, _), ok in zip(swaps, applied, strict=True)
                              if ok and swap.event])
        return moved

    # -- lifecycle ----------------------------------------------------------------

    async def start(self) -> None:
        """Read the records (bounded retries, see the module docstring), then
        start the refresh task."""
        delay = 0.1
        read = False
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self._start_wait):
                while not (read := await self.refresh(decide=False)):
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 1.0)
        if not read:
            logger.warning("starting without the vip records: every room is in the "
                           "normal sect until the store answers")
        self._refresher.start()

    async def stop(self) -> None:
        await self._refresher.stop()
