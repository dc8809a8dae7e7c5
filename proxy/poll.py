"""A long poll from its parameters to its answer, as plain calls: the listener path.

:meth:`Polls.start` takes a poll's room, query and ``Accept`` header and a
``reply`` callback, and calls ``reply`` exactly once with the answer: at once
when it can (a first poll, messages pending), later when the poll was held
(:mod:`.hold` wakes it) or had to wait for a pull. It returns the poll while
it is in flight, so the caller can :meth:`Poll.cancel` it when the client
leaves. Nothing here knows HTTP: the front (:mod:`.front`) and aiohttp's
routes (:mod:`.routes`) both call it.

What a poll does, in order (DESIGN.md, "Listening"):

1. parse and check the parameters (a 400 names the bad one);
2. read the room's snapshot from memory (a room this node holds no snapshot
   of waits for its first pull, the slow path);
3. count a heartbeat, read the online count;
4. a first poll is answered at once with the recent messages;
5. a cursor this node cannot place (another epoch, past the head) is checked
   with a fresh pull, then reset or read (the slow path);
6. otherwise :func:`decide`: deliver now, or hold (plain or paced).

Only the slow paths create a task; a held poll is a :class:`Poll` in its
room's hold structures, woken by a call.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import NamedTuple

from liveroom.clock import Clock
from liveroom.codec import JSON, MSGPACK, wants_msgpack
from liveroom.errors import LiveroomError
from liveroom.metrics import Metrics
from liveroom.roles import RoomReader, StatsReader
from liveroom.settings import Settings
from liveroom.snapshot import Delivery, Snapshot, read, recent

from . import answer
from .context import Context, ContextSigner
from .heartbeats import Heartbeats
from .hold import Holds, Ticket
from .params import Cursor, PollParams, parse_poll
from .reply import INTERNAL, Reply, failure_reply
from .tiers import Pace, TierTable

log = logging.getLogger("liveroom.proxy")

OUTCOMES = ("first", "reset", "delivered", "empty")
"""What a poll's answer was, as the ``liveroom_polls`` metric counts it."""


class Decision(NamedTuple):
    """What a poll at known cursors does now (:func:`decide`)."""

    delivery: Delivery
    pace: Pace
    deliver: bool
    """Answer with ``delivery`` now; otherwise hold (plain or paced by ``pace``)."""


def decide(snap: Snapshot, uid: str, cursor: Cursor, ctx: Context | None, tiers: TierTable,
           online: int, now_ms: int, answer_limit: int) -> Decision:
    """The decision for a later poll whose cursor this snapshot can place.

    A missing, forged, foreign or stale context counts as an answer just now:
    replaying an old one gains nothing. A time ahead of ours (another node's
    clock) counts as now too. A plain pace is due at once.
    """
    last_ms = min(ctx.last_ms, now_ms) if ctx is not None else now_ms
    pace = tiers.pace(online, uid, last_ms)
    d = read(snap, cursor.seq, cursor.iseq, limit=answer_limit,
             seq_ic=ctx.seq_ic if ctx else None, iseq_ic=ctx.iseq_ic if ctx else None)
    return Decision(d, pace, not d.empty and now_ms >= pace.due_ms)


def places(snap: Snapshot, cursor: Cursor) -> bool:
    """Whether ``snap`` can place ``cursor`` (same epoch, not past the head)."""
    return cursor.epoch == snap.epoch and cursor.seq <= snap.head and cursor.iseq <= snap.head


class Polls:
    """The listener path of one node."""

    def __init__(self, settings: Settings, reader: RoomReader, heartbeats: Heartbeats,
                 stats: StatsReader, holds: Holds, tiers: TierTable, signer: ContextSigner,
                 clock: Clock, metrics: Metrics) -> None:
        self.settings = settings
        self.reader = reader
        self.heartbeats = heartbeats
        self.stats = stats
        self.holds = holds
        self.tiers = tiers
        self.signer = signer
        """Replaced at start-up once the shared secret is known."""
        self.clock = clock
        # Metric children bound once: ``.labels()`` is a look-up and a lock.
        self.outcomes = {o: metrics.polls.labels(o) for o in OUTCOMES}
        self.delivered_important = metrics.deliveries.labels("important")
        self.delivered_normal = metrics.deliveries.labels("normal")

    def start(self, room: str, query: Mapping[str, str], accept: str,
              reply: Callable[[Reply], None]) -> Poll | None:
        """Start one poll; ``reply`` gets its answer, maybe before this returns.

        Returns the poll while it is in flight (cancel it when its client
        leaves), ``None`` once answered.
        """
        s = self.settings
        try:
            p = parse_poll(room, query, default_timeout=s.poll_timeout,
                           max_timeout=s.poll_timeout_max, recent_default=s.recent_default,
                           recent_max=s.recent_max)
        except LiveroomError as exc:
            reply(failure_reply(exc))
            return None
        poll = Poll(self, p, wants_msgpack(accept), reply)
        snap = self.reader.current(p.room)
        if snap is None:
            poll.task = asyncio.create_task(poll.first_pull(), name=f"proxy-poll-{p.room}")
            return poll
        poll.guard(lambda: poll.begin(snap))
        return None if poll.done else poll


class Poll:
    """One poll in flight; the hold wakes it (:class:`~proxy.hold.Held`)."""

    __slots__ = ("_polls", "_reply", "deadline", "done", "due", "hint_iseq", "hint_seq",
                 "last", "p", "pace", "paced_deadline", "task", "ticket", "use_msgpack")

    def __init__(self, polls: Polls, p: PollParams, use_msgpack: bool,
                 reply: Callable[[Reply], None]) -> None:
        self._polls = polls
        self.p = p
        self.use_msgpack = use_msgpack
        self._reply = reply
        self.ticket: Ticket | None = None
        self.task: asyncio.Task[None] | None = None
        self.done = False
        self.deadline = 0.0
        """When a plain hold answers empty, on the loop's clock."""
        self.pace: Pace | None = None
        self.last: Delivery | None = None
        """The last read, empty (an empty answer carries its counts)."""
        self.hint_seq: int | None = None
        self.hint_iseq: int | None = None
        self.due = 0.0
        self.paced_deadline = 0.0
        """When a paced poll is due and when it times out, on the clock's monotonic time."""

    # -- performing ------------------------------------------------------------

    def guard(self, step: Callable[[], None]) -> None:
        """Run one step; a failure answers the poll instead of stranding it."""
        try:
            step()
        except LiveroomError as exc:
            self._finish(failure_reply(exc))
        except Exception:
            log.exception("answering a poll of room %s failed", self.p.room)
            self._finish(INTERNAL)

    async def first_pull(self) -> None:
        """The slow path of a room this node holds no snapshot of yet."""
        try:
            snap = await self._polls.reader.snapshot(self.p.room)
        except LiveroomError as exc:
            self._finish(failure_reply(exc))
            return
        finally:
            self.task = None
        self.guard(lambda: self.begin(snap))

    def begin(self, snap: Snapshot) -> None:
        polls, p = self._polls, self.p
        polls.heartbeats.beat(p.room, p.uid)
        online = polls.stats.online(p.room)
        cursor = p.cursor
        if cursor is None:
            pace = polls.tiers.pace(online, p.uid, self._now_ms())
            self._answer(snap, recent(snap, p.recent), pace, "first")
            return
        self.deadline = asyncio.get_running_loop().time() + p.timeout
        if places(snap, cursor):
            self.settle(snap, cursor, online)
        else:
            # This node may only lag behind the node the listener came from:
            # confirm with a fresh pull before resetting.
            self.task = asyncio.create_task(self._confirm(cursor, online),
                                            name=f"proxy-poll-{p.room}")

    async def _confirm(self, cursor: Cursor, online: int) -> None:
        try:
            snap = await self._polls.reader.wait_pulled(self.p.room)
        except LiveroomError as exc:
            self._finish(failure_reply(exc))
            return
        finally:
            self.task = None
        if places(snap, cursor):
            self.guard(lambda: self.settle(snap, cursor, online))
        else:
            self.guard(lambda: self._answer(
                snap, recent(snap, self.p.recent),
                self._polls.tiers.pace(online, self.p.uid, self._now_ms()), "reset",
                reset=True))

    def settle(self, snap: Snapshot, cursor: Cursor, online: int) -> None:
        """Decide, and deliver or hold."""
        polls, p = self._polls, self.p
        ctx = polls.signer.verify(cursor.ctx, p.room, p.uid, cursor.epoch, cursor.seq,
                                  cursor.iseq)
        now_ms = self._now_ms()
        decision = decide(snap, p.uid, cursor, ctx, polls.tiers, online, now_ms,
                          polls.settings.answer_limit)
        pace = self.pace = decision.pace
        self.last = decision.delivery
        if ctx is not None:
            self.hint_seq, self.hint_iseq = ctx.seq_ic, ctx.iseq_ic
        if decision.deliver:
            self._answer(snap, decision.delivery, pace, "delivered")
        elif pace.plain:
            self._hold_plain(snap)
        else:
            # Held by the room's ticker until due (or an important message
            # cuts through), on the clock's monotonic time.
            mono = polls.clock.monotonic()
            self.due = mono + (pace.due_ms - now_ms) / 1000
            self.paced_deadline = mono + p.timeout
            self._hold_paced(snap, cursor, pending=not decision.delivery.empty)

    def _hold_plain(self, snap: Snapshot) -> None:
        held = self._polls.holds.hold(self.p.room, snap, self, self.deadline)
        if isinstance(held, Ticket):
            self.ticket = held
        elif held is None:
            self._empty()
        else:  # the room already moved on: read the newer snapshot
            self.wake(held)

    def _hold_paced(self, snap: Snapshot, cursor: Cursor, *, pending: bool) -> None:
        self.ticket = self._polls.holds.hold_paced(
            self.p.room, snap, self, epoch=cursor.epoch, seq=cursor.seq, iseq=cursor.iseq,
            pending=pending, due=self.due, deadline=self.paced_deadline)
        if self.ticket is None:
            self._empty()

    def wake(self, snapshot: Snapshot | None) -> None:
        """The hold released this poll: answer it, or hold it again."""
        self.ticket = None
        if self.done:
            return
        if snapshot is None:
            self.guard(self._empty)
        else:
            self.guard(lambda: self._reread(snapshot))

    def _reread(self, snap: Snapshot) -> None:
        p, pace = self.p, self.pace
        cursor = p.cursor
        assert cursor is not None
        assert pace is not None
        if snap.epoch != cursor.epoch:
            self._answer(snap, recent(snap, p.recent), pace, "reset", reset=True)
            return
        d = read(snap, cursor.seq, cursor.iseq, limit=self._polls.settings.answer_limit,
                 seq_ic=self.hint_seq, iseq_ic=self.hint_iseq)
        if not d.empty:
            self._answer(snap, d, pace, "delivered")
            return
        self.last = d
        if pace.plain:
            self._hold_plain(snap)
        else:
            self._hold_paced(snap, cursor, pending=False)

    def cancel(self) -> None:
        """The client left: forget the poll, answer nothing."""
        if self.done:
            return
        self.done = True
        if self.ticket is not None:
            self._polls.holds.cancel(self.ticket)
            self.ticket = None
        if self.task is not None:
            self.task.cancel()
            self.task = None

    # -- answering -------------------------------------------------------------

    def _now_ms(self) -> int:
        return int(self._polls.clock.time() * 1000)

    def _empty(self) -> None:
        """An empty answer: the listener's own cursors and epoch, unchanged."""
        assert self.last is not None
        assert self.pace is not None
        self._answer(None, self.last, self.pace, "empty", keep_cursors=True)

    def _answer(self, snap: Snapshot | None, d: Delivery, pace: Pace, outcome: str, *,
                reset: bool = False, keep_cursors: bool = False) -> None:
        """Encode and send the answer. An empty answer keeps the listener's
        last non-empty answer time (``pace.last_ms``) in its new context; any
        other answer starts a new interval now."""
        polls, p = self._polls, self.p
        polls.outcomes[outcome].inc()
        if d.important:
            polls.delivered_important.inc(len(d.important))
        if d.messages:
            polls.delivered_normal.inc(len(d.messages))
        if keep_cursors:
            assert p.cursor is not None
            epoch, memo_snap, last_ms = p.cursor.epoch, None, pace.last_ms
        else:
            assert snap is not None
            epoch, memo_snap, last_ms = snap.epoch, snap, self._now_ms()
        ctx = polls.signer.sign(p.room, p.uid, epoch, d.seq, d.iseq,
                                Context(d.seq_ic, d.iseq_ic, last_ms))
        body = answer.encode(memo_snap, p.room, epoch, d, reset=reset,
                             online=polls.stats.online(p.room), interval_ms=pace.interval_ms,
                             ctx=ctx, use_msgpack=self.use_msgpack)
        self._finish(Reply(200, body, MSGPACK if self.use_msgpack else JSON))

    def _finish(self, reply: Reply) -> None:
        if self.done:
            return
        self.done = True
        self._reply(reply)
