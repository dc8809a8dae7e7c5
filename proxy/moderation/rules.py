"""Moderation on a node: mutes, bans and slow mode, applied to polls and sends.

The store keeps each room's moderation and its audit (``store.moderation``:
:class:`~liveroom.store.moderation.ModerationStore`); every node keeps a copy of the
rooms that have some, :attr:`Moderation.rules`. It reads them all at start,
then every :data:`MODERATION_EVERY` seconds asks the store's journal which
rooms changed since the version it last saw (one round trip, nothing more
when nothing changed) and rereads those. The node an action goes through
applies it at once, and a refresh that began before it leaves that room
as the action made it (its read may be older, its reply held) and reads it
again next time. So an action applies everywhere within about
:data:`MODERATION_EVERY` plus two round trips.

**On a poll's path** a room without moderation costs one dict lookup
(``rules.get(room)``); nothing there touches the store.

- **Mute**: the uid's sends are refused, 403 ``muted`` with the time left; it
  still listens.
- **Ban**: its polls and sends are refused, 403 ``banned``; its polls held
  on a node are answered with that 403 when the node learns of the ban, and
  the node drops it from the room's members at once (it leaves the online
  list and count at the node's next presence write and the merge after it).
- **Slow mode** (``slow`` seconds): each uid may send one normal message per
  ``slow``-second window (one more of the windows the store counts sends in,
  so across nodes too); the refusal is a 429 with ``Retry-After``. Answers
  carry ``"slow": s`` so clients can show it; the node tells ``on_slow(room)``
  when it learns that a room's slow mode changed (its held polls are
  answered with it: :mod:`proxy.polls.news`).

The backend's tokens (publisher, admin) speak for the system: their sends
are not moderated. Sanctions end by the node's clock (``until_ms``) without
waiting for the store: a mute ends on time everywhere.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from liveroom.clock import Clock
from liveroom.errors import Banned, Muted, StoreUnavailable
from liveroom.lifecycle import Outage, Periodic
from liveroom.metrics import Metrics
from liveroom.ratelimit import RateLimits, Window
from liveroom.store.base import AuditEntry, ModerationStore, RoomModeration, Sanction, in_force

logger = logging.getLogger("liveroom.proxy.moderation")

MODERATION_EVERY = 0.25
"""Seconds between two reads of the store's journal of changes."""


def _left(sanction: Sanction, now_ms: int) -> str:
    if not sanction.until_ms:
        return "until it is lifted"
    return f"for {max(1, (sanction.until_ms - now_ms + 999) // 1000)} s more"


class RoomRules:
    """A room's moderation as the node applies it: sanctions by uid."""

    __slots__ = ("banned", "muted", "slow", "version")

    def __init__(self, state: RoomModeration) -> None:
        self.muted = {s.uid: s for s in state.muted}
        self.banned = {s.uid: s for s in state.banned}
        self.slow = state.slow
        self.version = state.version

    def ban_of(self, room: str, uid: str, now_ms: int) -> Banned | None:
        """The refusal of ``uid`` if it is banned now, else None."""
        ban = self.banned.get(uid)
        if ban is not None and in_force(ban, now_ms):
            return Banned(f"uid {uid} is banned from room {room} {_left(ban, now_ms)}")
        return None

    def check_poll(self, room: str, uid: str, now_ms: int) -> None:
        """Raise :class:`Banned` if ``uid`` is banned now."""
        if uid in self.banned:
            refusal = self.ban_of(room, uid, now_ms)
            if refusal is not None:
                raise refusal

    def check_send(self, room: str, uid: str, now_ms: int) -> None:
        """Raise :class:`Banned` or :class:`Muted` if ``uid`` may not send now."""
        self.check_poll(room, uid, now_ms)
        mute = self.muted.get(uid)
        if mute is not None and in_force(mute, now_ms):
            raise Muted(f"uid {uid} is muted in room {room} {_left(mute, now_ms)}",
                        retry_after=(mute.until_ms - now_ms) / 1000)


class Moderation:
    """A node's copy of every room's moderation. Start and stop it with the
    node; ``on_ban(room, uid, refusal)`` is called once for each ban the
    node learns of (to answer the uid's held polls with ``refusal`` and drop
    its presence), ``on_slow(room)`` once for each change of a room's slow
    mode (on, off, another interval)."""

    def __init__(self, store: ModerationStore, clock: Clock, *,
                 on_ban: Callable[[str, str, Banned], None] = lambda room, uid, refusal: None,
                 on_slow: Callable[[str], None] = lambda room: None,
                 every: float = MODERATION_EVERY, metrics: Metrics | None = None) -> None:
        self._metrics = metrics
        self._store = store
        self._clock = clock
        self.on_ban = on_ban
        self.on_slow = on_slow
        self.rules: dict[str, RoomRules] = {}
        """By room, the rooms with some moderation (never replaced: the poll
        path keeps a reference to it)."""
        self.version = -1
        """The journal's version last read (-1: nothing read yet)."""
        self._seen = 0
        """The highest version of the copies applied."""
        self._ticks = 0
        """Counts the refreshes begun and the actions through this node stored."""
        self._acted: dict[str, int] = {}
        """Room -> the tick of the last action through this node (kept
        until a refresh that began after it ends)."""
        self._reread: int | None = None
        """The tick from which every room must be read again (None: none due):
        an action through this node whose version showed the store had lost
        writes this node applied, or a refresh that found the store away (a
        restart may have lost its last writes, and writes since may have
        taken the journal past this node's version again). The next refresh
        that begins after it reads everything."""
        self._slow_limits: dict[tuple[int, RateLimits], RateLimits] = {}
        self._outage = Outage(logger)
        self._reader = Periodic("proxy-moderation", every, self.refresh, clock, logger)

    def _now_ms(self) -> int:
        return int(self._clock.time() * 1000)

    async def start(self) -> None:
        """Read every room's moderation (a store that is down is logged and
        read by the next refresh), then keep up with the journal."""
        await self.refresh()
        self._reader.start()

    async def stop(self) -> None:
        await self._reader.stop()

    # -- the paths --------------------------------------------------------------

    def send_limits(self, room: str, uid: str, limits: RateLimits | None,
                    important: bool) -> RateLimits | None:
        """The windows a sender's message is counted in: ``limits``, and for
        a normal message in a slow room one more (one per ``slow`` s).
        Raises :class:`Banned` or :class:`Muted` first."""
        rules = self.rules.get(room)
        if rules is None:
            return limits
        rules.check_send(room, uid, self._now_ms())
        if important or not rules.slow:
            return limits
        base = limits or RateLimits(per_uid=())
        key = (rules.slow, base)
        slowed = self._slow_limits.get(key)
        if slowed is None:
            if len(self._slow_limits) > 64:
                self._slow_limits.clear()
            per_uid = tuple(sorted((*base.per_uid, Window(1, rules.slow)),
                                   key=lambda w: w.seconds))
            slowed = self._slow_limits[key] = RateLimits(
                per_uid=per_uid, room_per_second=base.room_per_second)
        return slowed

    def check_speaker(self, room: str, uid: str) -> None:
        """Raise :class:`Banned` or :class:`Muted` if ``uid`` may not speak in
        ``room`` now: nor send, nor tap, nor recall."""
        rules = self.rules.get(room)
        if rules is not None:
            rules.check_send(room, uid, self._now_ms())

    def like_pace(self, room: str, uid: str) -> int:
        """The room's slow mode (seconds; 0: none), which paces a uid's like
        requests as it paces its messages. Raises :class:`Banned` or
        :class:`Muted` first (:meth:`check_speaker`)."""
        rules = self.rules.get(room)
        if rules is None:
            return 0
        rules.check_send(room, uid, self._now_ms())
        return rules.slow

    # -- changes ------------------------------------------------------------------

    def count(self, action: str) -> None:
        """One more ``action`` (``liveroom_moderation_actions_total``)."""
        if self._metrics is not None:
            self._metrics.moderation_actions.labels(action).inc()

    async def act(self, room: str, entry: AuditEntry, *,
                  event: bytes | None = None) -> RoomModeration | None:
        """Apply ``entry`` through the store (with its webhook ``event``:
        ``ModerationStore.act``) and here at once; the room's moderation
        after it (None: none left). It happens at the entry's ``at_ms``: a
        sanction of ``seconds`` ends ``seconds`` after it, not after a
        later reading of the clock."""
        now_ms = entry.at_ms
        version = await self._store.act(room, entry, now_ms, event=event)
        tick = self._acted[room] = self._ticks
        self._ticks += 1
        self.count(entry.action)
        state = (await self._store.rooms([room], now_ms)).get(room)
        # The journal's versions only grow: an action given a version this
        # node has read already found a store that lost its last writes (a
        # Redis restart), and what this node applied of them is gone. Its
        # read is applied whatever its version, and the next refresh reads
        # every room again (redis seed 86779: a mute through a node that
        # had applied a lost version was refused there as older, and the
        # muted uid's taps were acknowledged).
        went_back = version <= max(self.version, self._seen)
        if went_back:
            self._reread = tick
        self._apply(room, state, newer=went_back)
        return state

    async def record(self, room: str, entry: AuditEntry) -> None:
        """Record ``entry`` (a recall: nothing else changes) in the room's audit."""
        await self._store.act(room, entry, self._now_ms())
        self.count(entry.action)

    async def refresh(self) -> None:
        """Read the rooms the journal says changed since :attr:`version` (all
        of them the first time, or after the store lost its journal). A
        room an action through this node changed after the refresh began
        is left as the action made it (the read may be older: a reply held)
        and read again by the next refresh."""
        began = self._ticks
        self._ticks += 1
        reread = self._reread is not None
        try:
            version, rooms = await self._store.changed(max(self.version, 0))
            if version == self.version and not reread:
                return
            # Journal versions only grow, and a copy's is never past the
            # journal's: one that went back is a store that restarted
            # empty, or lost its last writes (an action through this node
            # or an outage may have told so first: ``_reread``).
            reset = reread or version < max(self.version, self._seen)
            if reset:  # read everything again
                version, rooms = await self._store.changed(0)
            states = await self._store.rooms(rooms, self._now_ms()) if rooms else {}
        except StoreUnavailable:
            self._outage.failed("the store is unavailable: moderation stays as last read")
            if self._reread is None:
                self._reread = began
            return
        self._outage.worked("the store is back: moderation is read again")
        acted = self._acted
        later = {room for room, tick in acted.items() if tick > began}
        if reset:
            # The copies' versions are of the store before, but for the
            # rooms left to an action: their copies stay, with them their
            # versions, which an action's read must be able to tell from
            # its own (redis seed 135536: a ban's read, given a lost
            # version again, held older than such a copy and dropped).
            self._seen = max((self.rules[room].version for room in later
                              if room in self.rules), default=0)
            if self._reread is not None and self._reread < began:
                self._reread = None  # read everything since
            for room in set(self.rules) - set(states) - later:
                self._apply(room, None)
        for room in rooms:
            if room not in later:
                # After a reset the versions started again: what is read
                # is newer than any copy, whatever its version.
                self._apply(room, states.get(room), newer=reset)
        self._acted = {room: acted[room] for room in later}
        if not later:  # else from the same version again: what it skipped
            self.version = version

    def _apply(self, room: str, state: RoomModeration | None, *, newer: bool = False) -> None:
        """Apply a read of the room's moderation (None: none), unless its
        version is older than the copy's (``newer``: it is not, whatever
        its version: read after the store restarted empty)."""
        old = self.rules.get(room)
        was_slow = 0 if old is None else old.slow
        if state is None or not (state.muted or state.banned or state.slow):
            self.rules.pop(room, None)
            if was_slow:
                self.on_slow(room)
            return
        if old is not None and state.version < old.version and not newer:
            return  # a read older than what this node applied already
        rules = self.rules[room] = RoomRules(state)
        self._seen = max(self._seen, state.version)
        if rules.slow != was_slow:
            self.on_slow(room)
        now_ms = self._now_ms()
        for uid in rules.banned:
            refusal = rules.ban_of(room, uid, now_ms)
            if refusal is not None and (old is None or old.ban_of(room, uid, now_ms) is None):
                self.on_ban(room, uid, refusal)
