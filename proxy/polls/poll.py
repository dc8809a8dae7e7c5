"""A long poll from its parameters to its answer, as plain calls: the listener path.

:meth:`Polls.start` takes a poll's room, query and ``Accept`` header and a
``reply`` callback, and calls ``reply`` exactly once with the answer: at once
when it can (a first poll, messages pending), later when the poll was held
(:mod:`.hold` wakes it) or had to wait for a pull. It returns the poll while
it is in flight, so the caller can :meth:`Poll.cancel` it when the client
leaves. Nothing here knows HTTP: the front (:mod:`proxy.front`) and aiohttp's
routes (:mod:`proxy.api.routes`) both call it.

What a poll does, in order (docs/design.md, "Listening"):

1. parse and check the parameters (a 400 names the bad one);
2. read the room's snapshot from memory (a room this node holds no snapshot
   of waits for its first pull, the slow path);
3. read the online count, count a heartbeat (trusted or not, for the
   automatic vip rule: :meth:`Poll.trusted`);
4. pace the poll (:mod:`.tiers`), checking the listener's ``ctx`` only when
   :func:`.step.needs_ctx` says so;
5. do what :func:`.step.step` says, asking it again with each thing learnt
   (what the cursor has pending, a confirming pull, a wake-up): answer the
   recent messages (a first poll, a reset) or hold them until due, pull to
   confirm a cursor this node cannot place, read, deliver, hold plain or
   paced. Every rule is in :mod:`.step`; this module only reads, pulls,
   holds and answers.

**Work per message, not per listener.** What a poll reads at a cursor, and
the answer's bytes up to the listener's ``ctx``, depend only on the snapshot
and the cursor (and the format, the online count, the interval): they are
kept in the snapshot's memo, so the listeners a message wakes at one cursor
read and encode it once, and each adds only its signed ``ctx``. In a plain
room a listener's ``ctx`` is checked only when its answer needs it (an empty
answer carries the time of its last non-empty one; a cursor older than the
snapshot's counting anchor needs its important counts), or, in open mode with
the automatic vip rule on, when its room has at least ``--vip-demote`` online
(its heartbeat is trusted if the ``ctx`` is genuine).

Only the slow paths create a task; a held poll is a :class:`Poll` in its
room's hold structures, woken by a call.
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections.abc import Callable
from typing import Final

from liveroom.clock import Clock
from liveroom.codec import JSON, MSGPACK, wants_msgpack
from liveroom.metrics import Metrics
from liveroom.personal import PersonalRead, read_personal, retaken
from liveroom.roles import RoomReader, StatsReader
from liveroom.settings import Settings
from liveroom.snapshot import ABSENT_EPOCH, Delivery, Snapshot, read, recent, ts_at

from ..front.request import Held
from ..gifts.ranking import NO_GIFTS, Rankings
from ..likes.likes import Likes
from ..moderation.rules import RoomRules
from ..params import Cursor, PollParams, parse_poll
from ..reply import Reply, answer_to
from ..tickets import Tickets
from . import answer
from .context import Context, ContextSigner, NewsMarks
from .heartbeats import Heartbeats
from .hold import HeldPoll, Holds
from .news import RoomNews
from .step import (
    CONFIRM,
    DELIVER,
    EMPTY,
    HOLD_PACED,
    HOLD_PLAIN,
    HOLD_RECENT,
    READ,
    RECENT,
    RESET,
    STAND_FIRST,
    Step,
    needs_ctx,
    step,
)
from .tiers import Pace, TierTable

logger: Final = logging.getLogger("liveroom.proxy")
_FAILED: Final = "answering a poll of room %s failed"

OUTCOMES: Final = ("first", "reset", "delivered", "empty")
"""What a poll's answer was, as the ``liveroom_polls`` metric counts it."""
_FIRST: Final = 0
_RESET: Final = 1
_DELIVERED: Final = 2
_EMPTY: Final = 3
_IMPORTANT: Final = 4
_NORMAL: Final = 5
_PERSONAL: Final = 6

MEMO_MAX: Final = 64
"""Answers kept per snapshot (distinct cursors and formats)."""
MEMO_BYTES_MAX: Final = 64 * 1024
"""Answers larger than this (a far-behind listener's catch-up) are not kept."""

ANCHORS_YOUNG_MS: Final = 60_000
"""How long after this node's copy of a room began its polls check the
message their context names at their cursor (:meth:`Poll._rewritten`)."""


def _anchor(delivery: Delivery, snap: Snapshot | None = None) -> int:
    """The ``ts`` of the message at ``delivery``'s ``seq``: the one it
    delivers, else the one ``snap`` holds there (a first poll or a reset
    brings no old important message, yet its cursor is past it: a store
    that lost it and gave its seq to another must still be told; simulator,
    redis seed 101740). 0: unknown (the next answer that delivers one names it)."""
    seq = delivery.seq
    for items in (delivery.messages, delivery.important):
        if items and items[-1].seq == seq:
            return items[-1].ts
    return 0 if snap is None else ts_at(snap, seq)


_NO_RANKING: Final = NO_GIFTS.version
"""The ranking version of a room without gifts."""


class Polls:
    """The listener path of one node."""

    def __init__(self, settings: Settings, reader: RoomReader, heartbeats: Heartbeats,
                 stats: StatsReader, holds: Holds, tiers: TierTable, signer: ContextSigner,
                 clock: Clock, metrics: Metrics,
                 is_vip: Callable[[str], bool] = lambda room: False, *,
                 tickets: Tickets | None = None, likes: Likes | None = None,
                 ranking: Rankings | None = None,
                 rules: dict[str, RoomRules] | None = None,
                 news: RoomNews | None = None) -> None:
        self.is_vip = is_vip
        self.vip_spread = settings.vip_spread
        self.reader = reader
        self.heartbeats = heartbeats
        self.stats = stats
        self.holds = holds
        self.tiers = tiers
        self.signer = signer
        """Made by the proxy from the configured (or, on memory, made up) secret;
        never replaced."""
        self.clock = clock
        self.tickets = tickets
        """The ticket verifier in ``ticket`` mode; None: open."""
        self.likes = likes
        """The node's likes: answers carry a room's total (None: 0)."""
        self.rules: dict[str, RoomRules] = {} if rules is None else rules
        """The node's moderation by room (``Moderation.rules``, kept up to
        date in place): a poll of a room in it is checked for a ban."""
        self.ranking = ranking
        """The node's gift rankings: answers carry a room's when the
        listener has not seen it (None: none)."""
        self.news = news
        """The node's news of its rooms: a poll held in a room whose news
        changed lately, and that missed it, has the room told (None: never)."""
        self.marks = NewsMarks()
        """The news marks of the answers' figures (once per message, not per listener)."""
        rule = settings.vip_rule()
        self.trust_ctx = rule is not None
        """In open mode, a poll's heartbeat is trusted when its ``ctx`` is
        genuine (with the automatic vip rule on: nobody else reads the mark)..."""
        self.trust_from = 0 if rule is None else rule.demote
        """... in a room whose online count is at least this (see :meth:`Poll.trusted`)."""
        self.answer_limit = settings.answer_limit
        self.answer_bytes_max = settings.answer_bytes_max
        # Read on every poll: copied into native attributes (docs/development.md,
        # "Compiled modules").
        self._poll_timeout = settings.poll_timeout
        self._poll_timeout_max = settings.poll_timeout_max
        self._recent_default = settings.recent_default
        self._recent_max = settings.recent_max
        self._loop: asyncio.AbstractEventLoop | None = None
        self.pulling: dict[tuple[str, str], list[Poll]] = {}
        """Polls waiting for a pull (a first one, a confirming one), by room
        and uid: not held yet, and a ban answers them too. At most every
        poll in flight; an entry goes with its pull."""
        # Counted in plain integers and added to the metrics when they are
        # rendered or refreshed: a Prometheus increment takes a lock.
        self.tally = metrics.tally([*(metrics.polls.labels(o) for o in OUTCOMES),
                                    metrics.deliveries.labels("important"),
                                    metrics.deliveries.labels("normal"),
                                    metrics.deliveries.labels("personal")])

    def refuse_listener(self, room: str, uid: str, exc: Exception) -> int:
        """Answer listener ``uid``'s polls of ``room`` held here with ``exc``
        (a ban); how many."""
        refused = 0
        for held in self.holds.take_listener(room, uid):
            if isinstance(held, Poll):
                held.held_poll = None
                held.fail(exc)
                refused += 1
        for poll in self.pulling.pop((room, uid), ()):
            if poll.task is not None:
                poll.task.cancel()
            poll.fail(exc)
            refused += 1
        return refused

    def ranking_field(self, room: str, seen: int | None, use_msgpack: bool,
                      epoch: str) -> tuple[bytes, int]:
        """The ``ranking`` field of an answer in broadcast ``epoch`` (empty:
        none): the room's ranking unless its version is ``seen``, the one
        the poll echoed (:mod:`proxy.gifts.ranking`); and the version the
        listener has after it."""
        ranking = self.ranking
        if ranking is None:
            return b"", _NO_RANKING
        current = ranking.of(room, epoch)
        if current is None:
            if seen is None or seen == _NO_RANKING:
                return b"", _NO_RANKING
            current = NO_GIFTS
        elif current.version == seen:
            return b"", seen
        return current.mp if use_msgpack else current.json, current.version

    def slow_of(self, room: str) -> int:
        """The room's slow mode as answers show it (0: off). No lookup while
        no room has moderation (the common case, on every answer)."""
        rules = self.rules
        found = rules.get(room) if rules else None
        return 0 if found is None else found.slow

    def missed_news(self, room: str, epoch: str, ctx: Context | None, likes: int) -> bool:
        """Whether a listener whose last answer's ``ctx`` marks what it
        showed would be shown other figures now (``likes``, in ``epoch``):
        it missed a change between that answer and this poll. Unknown (no
        ``ctx``) is not a miss: such a listener is told at its next answer."""
        if ctx is None or ctx.news == 0:
            return False
        ranking = self.ranking
        current = None if ranking is None else ranking.of(room, epoch)
        return ctx.news != self.marks.of(likes, self.slow_of(room),
                                     _NO_RANKING if current is None else current.version)

    def likes_of(self, room: str, epoch: str) -> int:
        """The room's likes as an answer in broadcast ``epoch`` shows them
        (0 without likes, or in a room that does not exist)."""
        likes = self.likes
        if likes is None or epoch == ABSENT_EPOCH:
            return 0
        return likes.total(room, epoch)

    def loop_time(self) -> float:
        """The running loop's time (plain polls' deadlines are on it)."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        return loop.time()

    def start(self, room: str, query: dict[str, str], accept: str,
              reply: Callable[[Reply], None],
              authorization: str | bytes | None = None) -> Poll | None:
        """Start one poll; ``reply`` gets its answer, maybe before this returns.

        Returns the poll while it is in flight (cancel it when its client
        leaves), ``None`` once answered. In ``ticket`` mode the poll's uid is
        its ticket's (``authorization``, the raw ``Authorization`` header, or
        the ``ticket`` parameter): a poll without a good one is refused (401)
        before anything is read, held or counted.
        """
        try:
            if self.tickets is not None:
                query = self.tickets.admit_poll(room, query, authorization)
            params = parse_poll(room, query, default_timeout=self._poll_timeout,
                                max_timeout=self._poll_timeout_max,
                                recent_default=self._recent_default,
                                recent_max=self._recent_max)
            rules = self.rules.get(params.room) if self.rules else None
            if rules is not None:  # the room has moderation: a banned uid is refused
                rules.check_poll(params.room, params.uid, int(self.clock.time() * 1000))
        except Exception as exc:
            reply(answer_to(exc, logger, _FAILED, room))
            return None
        poll = Poll(self, params, wants_msgpack(accept), reply)
        try:
            snap = self.reader.current(params.room)
        except Exception as exc:  # a new room past the cache's bound: 503
            poll.fail(exc)
            return None
        if snap is None:
            poll.task = asyncio.create_task(poll.first_pull(), name=f"proxy-poll-{params.room}")
            return poll
        try:  # ``Poll.run``, inlined: every poll comes this way
            poll.begin(snap)
        except Exception as exc:
            poll.fail(exc)
        return None if poll.done else poll


class Poll(Held):
    """One poll in flight; the hold wakes it (:class:`~proxy.polls.hold.Wakeable`),
    and the front lets go of it when its client leaves (:class:`~proxy.front.handler.Held`)."""

    __slots__ = (
        "_polls",
        "_reply",
        "checked",
        "ctx",
        "ctx_read",
        "deadline",
        "done",
        "due",
        "held_as",
        "held_poll",
        "hint_iseq",
        "hint_pn",
        "hint_seq",
        "last",
        "likes",
        "online",
        "pace",
        "paced_deadline",
        "params",
        "pn_out",
        "pseq_in",
        "pseq_out",
        "pts_out",
        "recent",
        "task",
        "use_msgpack",
    )

    def __init__(self, polls: Polls, params: PollParams, use_msgpack: bool,
                 reply: Callable[[Reply], None]) -> None:
        self._polls = polls
        self.params = params
        self.use_msgpack = use_msgpack
        self._reply = reply
        self.held_poll: HeldPoll | None = None
        self.task: asyncio.Task[None] | None = None
        self.done = False
        self.online = 0
        self.likes = 0
        self.deadline = 0.0
        """When a plain hold answers empty, on the loop's clock."""
        self.pace: Pace | None = None
        self.checked = False
        """The listener's ``ctx`` was checked (and ``pace`` counts from it)."""
        self.last: Delivery | None = None
        """The last read, empty (an empty answer carries its counts)."""
        self.hint_seq: int | None = None
        self.hint_iseq: int | None = None
        self.hint_pn: int | None = None
        self.ctx: Context | None = None
        self.ctx_read = False
        """The listener's ``ctx`` was verified (``ctx``: what it held, if genuine)."""
        self.pseq_in: int | None = None
        """The personal cursor read from: the one echoed, else the head when first read."""
        self.pseq_out = 0
        self.pn_out: int | None = None
        self.pts_out = 0
        """The personal cursor, its ordinal and that message's ``ts`` the
        answer carries (set by each read)."""
        self.due = 0.0
        self.paced_deadline = 0.0
        """When a paced poll is due and when it times out, on the clock's monotonic time."""
        self.held_as: Step | None = None
        """How the poll was last held (the step that held it); None: never."""
        self.recent: Snapshot | None = None
        """The snapshot a first poll or a reset held until due was held with."""

    # -- performing ------------------------------------------------------------

    def run(self, action: Callable[[Snapshot], None], snap: Snapshot) -> None:
        """Run one action; a failure answers the poll instead of stranding it."""
        try:
            action(snap)
        except Exception as exc:
            self.fail(exc)

    def fail(self, exc: Exception) -> None:
        """Answer the poll for ``exc`` (call it while handling it): the one
        guard of every step of a poll (:func:`proxy.reply.answer_to`)."""
        self.finish(answer_to(exc, logger, _FAILED, self.params.room))

    async def first_pull(self) -> None:
        """The slow path of a room this node holds no snapshot of yet."""
        self._pull_begins()
        try:
            snap = await self._polls.reader.snapshot(self.params.room)
        except Exception as exc:
            self.fail(exc)
            return
        finally:
            self.task = None
            self._pull_ends()
        self.run(self._pulled, snap)

    def _pull_begins(self) -> None:
        """The poll waits for a pull: where a ban finds it (until
        :meth:`_pull_ends`)."""
        self._polls.pulling.setdefault((self.params.room, self.params.uid), []).append(self)

    def _pull_ends(self) -> None:
        pulling, key = self._polls.pulling, (self.params.room, self.params.uid)
        waiting = pulling.get(key)
        if waiting is not None and self in waiting:
            waiting.remove(self)
            if not waiting:
                del pulling[key]

    def _pulled(self, snap: Snapshot) -> None:
        self._check_ban()
        self.begin(snap)

    def _check_ban(self) -> None:
        """Refuse the poll (403 ``banned``) when its uid was banned while it
        waited for a pull: a ban answers the polls held then, and this one
        was not held yet (found by the simulator: seed 255)."""
        polls, params = self._polls, self.params
        rules = polls.rules.get(params.room) if polls.rules else None
        if rules is not None:
            rules.check_poll(params.room, params.uid, int(polls.clock.time() * 1000))

    def begin(self, snap: Snapshot) -> None:
        polls, params = self._polls, self.params
        # A held poll keeps the snapshot's strings, not copies of its own: the
        # room's name and, when the cursor is in it, the epoch (about 130
        # bytes of each held poll).
        params.room = snap.room
        cursor = params.cursor
        if cursor is not None and cursor.epoch == snap.epoch:
            cursor.epoch = snap.epoch
        if snap.epoch != ABSENT_EPOCH:
            # A room that does not exist counts no heartbeat: statsvr keeps no
            # presence, viewers or series for made-up names (online stays 0).
            self.online = polls.stats.online(params.room)
            polls.heartbeats.beat(params.room, params.uid, self.trusted(cursor))
            polls.reader.read_by(params.room, params.uid)
        # The timeout counts from the poll's arrival, a confirming pull included.
        self.deadline = polls.loop_time() + params.timeout
        self._decide(snap, False)

    async def _confirm(self) -> None:
        self._pull_begins()
        try:
            snap = await self._polls.reader.wait_pulled(self.params.room)
        except Exception as exc:
            self.fail(exc)
            return
        finally:
            self.task = None
            self._pull_ends()
        self.run(self._confirmed, snap)

    def _confirmed(self, snap: Snapshot) -> None:
        self._check_ban()
        self._decide(snap, True)

    def trusted(self, cursor: Cursor | None) -> bool:
        """Whether this poll's heartbeat counts for the automatic vip rule:
        in ``ticket`` mode always (the uid is the ticket's); in open mode when
        the poll came back with the genuine ``ctx`` the node gave this uid at
        this cursor (a made-up uid's first poll has none: one client making
        up uids is counted online, never by the rule), checked only in a room
        whose online count reaches ``--vip-demote``: below it no trusted count
        can move a room, and at the default thresholds such a room is tiered,
        so its polls check their ``ctx`` anyway. A listener counts as trusted
        from its first such poll until it leaves (statsvr keeps the mark)."""
        polls = self._polls
        if polls.tickets is not None:
            return True
        if cursor is None or not cursor.ctx or not polls.trust_ctx \
                or self.online < polls.trust_from:
            return False
        return self._context(cursor) is not None

    def _check(self, cursor: Cursor, now_ms: int) -> int:
        """Check the listener's ``ctx``: the time of its last non-empty answer
        (and its important counts, as hints). A missing, forged, foreign or
        stale context counts as an answer just now: replaying an old one gains
        nothing; a time ahead of ours (another node's clock) counts as now."""
        self.checked = True
        ctx = self._context(cursor)
        if ctx is None:
            return now_ms
        return min(ctx.last_ms, now_ms)

    def _context(self, cursor: Cursor) -> Context | None:
        """The listener's ``ctx`` if genuine and for this request, verified
        once per poll; its counts kept as the read's hints."""
        if self.ctx_read:
            return self.ctx
        self.ctx_read = True
        params = self.params
        ctx = self.ctx = self._polls.signer.verify(cursor.ctx, params.room, params.uid,
                                                   cursor.epoch, cursor.seq, cursor.iseq)
        if ctx is not None:
            self.hint_seq, self.hint_iseq, self.hint_pn = ctx.seq_ic, ctx.iseq_ic, ctx.pn
        return ctx

    def _decide(self, snap: Snapshot, confirmed: bool) -> None:
        """Pace the poll in ``snap``'s room, then do what :func:`.step.step`
        says (``confirmed``: a fresh pull brought ``snap``)."""
        polls, params = self._polls, self.params
        cursor = params.cursor
        now_ms = int(polls.clock.time() * 1000)
        self.likes = polls.likes_of(params.room, snap.epoch)
        tiers = polls.tiers
        tier = tiers.tier(self.online)
        pace = self.pace = tiers.pace_in(
            tier, params.uid,
            self._check(cursor, now_ms) if needs_ctx(cursor, tier, snap) else now_ms)
        rewritten = cursor is not None and self._rewritten(snap, cursor, now_ms)
        self._take(step(snap, cursor, pace, now_ms, confirmed=confirmed, rewritten=rewritten),
                   snap, now_ms, None)

    def _rewritten(self, snap: Snapshot, cursor: Cursor, now_ms: int) -> bool:
        """Whether ``snap`` holds another message at the cursor's ``seq``
        (or for the listener at its ``pseq``) than the one the listener's
        context names: the store lost the
        listener's (a Redis restart that lost its last second) and a later
        send took its seq, and this node's copy began after (a node whose
        copy held the lost one starts a new epoch instead, see
        ``recvsvr.cache``). Checked where the context is read anyway, and
        where the copy is young (it began within :data:`ANCHORS_YOUNG_MS`:
        a node restarted, a room read again), so a steady room's plain
        polls pay nothing; a listener away for longer that comes back to a
        copy made after such a loss is not checked. In a young copy the
        context's claim is compared first, unverified: only one that names
        another message than the copy's is verified, so a young room's polls
        pay a few bytes of base64, not a MAC each."""
        if cursor.epoch != snap.epoch or (
                not self.ctx_read and now_ms - snap.born_ms >= ANCHORS_YOUNG_MS):
            return False
        return self._seq_rewritten(snap, cursor) or self._pseq_rewritten(snap, cursor)

    def _pseq_rewritten(self, snap: Snapshot, cursor: Cursor) -> bool:
        """The same for the listener's personal cursor: whether ``snap``
        holds another message for it at the ordinal its context names, at
        or before its ``pseq`` (:func:`liveroom.personal.retaken`; simulator,
        redis seed 133716). Only a listener with personal messages held pays
        (it verifies its context for its read anyway)."""
        pseq = self.params.pseq
        personal = snap.personal
        if pseq is None or personal is None:
            return False
        box = personal.boxes.get(self.params.uid)
        if box is None:
            return False
        ctx = self._context(cursor)
        if ctx is None or ctx.pn is None:
            return False
        return retaken(box, snap.phead, pseq, ctx.pn, ctx.pts)

    def _seq_rewritten(self, snap: Snapshot, cursor: Cursor) -> bool:
        """:meth:`_rewritten` at the cursor's ``seq``."""
        if not self.ctx_read:
            # Most contexts name the message the copy holds: their claim,
            # read without the MAC, settles it; only a claim of another
            # message is verified (a forged one must not reset anybody).
            claimed = self._polls.signer.claimed_anchor(cursor.ctx)
            if not claimed:
                return False
            held = ts_at(snap, cursor.seq)
            if held == 0 or held == claimed:
                return False
        ctx = self._context(cursor)
        if ctx is None or not ctx.anchor:
            return False
        held = ts_at(snap, cursor.seq)
        return held != 0 and held != ctx.anchor

    def _take(self, decision: Step, snap: Snapshot | None, now_ms: int,
              held_as: Step | None) -> None:
        """Do what ``decision`` says: read (and step again with what was read), pull,
        hold or answer. ``held_as`` is what :func:`.step.step` was given."""
        params = self.params
        cursor, pace = params.cursor, self.pace
        assert pace is not None
        delivery: Delivery | None = None
        if decision == READ:
            assert snap is not None
            assert cursor is not None
            delivery, head = self._read(snap, cursor, self.online)
            mine = self._personal(snap, cursor)
            if mine is not None and (mine.items or mine.pgap):
                if delivery.empty:
                    head = answer.head(snap.room, snap.epoch, delivery, reset=False,
                                       online=self.online, interval_ms=pace.interval_ms,
                                       use_msgpack=self.use_msgpack, likes=self.likes)
                delivery = delivery._replace(personal=mine.items, pgap=mine.pgap)
            decision = step(snap, cursor, pace, now_ms, delivery, held_as=held_as)
            if decision == DELIVER:
                self._send(snap.epoch, delivery, head, now_ms, _DELIVERED, snap)
                return
            self.last = delivery
        if decision == HOLD_PLAIN:
            assert snap is not None
            self._hold_plain(snap)
        elif decision == HOLD_PACED:
            assert snap is not None
            assert cursor is not None
            assert delivery is not None
            self._hold_paced(snap, cursor, pace, now_ms, pending=not delivery.empty)
        elif decision == RECENT:
            assert snap is not None
            self._recent(snap, _FIRST, params.recent, now_ms)
        elif decision == RESET:
            assert snap is not None
            self._recent(snap, _RESET, params.recent, now_ms)
        elif decision == HOLD_RECENT:
            assert snap is not None
            self._hold_recent(snap, pace, now_ms)
        elif decision == CONFIRM:
            self.task = asyncio.create_task(self._confirm(), name=f"proxy-poll-{params.room}")
        elif decision == EMPTY:
            self._empty()
        else:  # STAND_FIRST, STAND_RESET: from the snapshot it was held with
            assert self.recent is not None
            self._recent(self.recent, _FIRST if decision == STAND_FIRST else _RESET, 0, now_ms)

    def _read(self, snap: Snapshot, cursor: Cursor, online: int) -> tuple[Delivery, bytes]:
        """What the cursor has pending in ``snap`` and the answer's head,
        shared through the snapshot's memo."""
        pace = self.pace
        assert pace is not None
        key = (cursor.seq, cursor.iseq, self.hint_seq, self.hint_iseq, self.use_msgpack,
               online, self.likes, pace.interval_ms)
        memo = snap.memo
        found = memo.get(key)
        if found is not None:
            return found
        delivery = read(snap, cursor.seq, cursor.iseq, limit=self._polls.answer_limit,
                        seq_ic=self.hint_seq, iseq_ic=self.hint_iseq,
                        budget=self._polls.answer_bytes_max)
        head = b"" if delivery.empty else answer.head(
            snap.room, snap.epoch, delivery, reset=False, online=online,
            interval_ms=pace.interval_ms, use_msgpack=self.use_msgpack, likes=self.likes)
        return self._keep(memo, key, delivery, head)

    def _personal(self, snap: Snapshot, cursor: Cursor) -> PersonalRead | None:
        """The listener's own personal messages pending in ``snap`` (one
        dictionary lookup when it has none), and the personal cursor and
        ordinal its answer will carry."""
        pseq = self.pseq_in
        if pseq is None:
            params = self.params
            pseq = self.pseq_in = params.pseq if params.pseq is not None else snap.phead
        personal = snap.personal
        uid = self.params.uid
        ctx = self.ctx
        if personal is None or uid not in personal.boxes:
            self.pseq_out = max(pseq, snap.phead)
            self.pn_out = self.hint_pn
            self.pts_out = 0 if ctx is None else ctx.pts
            return None
        # Its ordinal at its cursor, for what it missed: only listeners with
        # personal messages held pay for reading their context.
        ctx = self._context(cursor)
        mine = read_personal(personal, snap.phead, uid, pseq, self.hint_pn,
                             0 if ctx is None else ctx.pts)
        assert mine is not None
        self.pseq_out, self.pn_out, self.pts_out = mine.pseq, mine.pn, mine.pts
        return mine

    def _recent(self, snap: Snapshot, outcome: int, count: int, now_ms: int) -> None:
        """A first poll's answer, or a reset's: the last ``count`` messages,
        cursors at the heads (the personal one too, its pending messages
        skipped like the important ones)."""
        pace = self.pace
        assert pace is not None
        mine = read_personal(snap.personal, snap.phead, self.params.uid, snap.phead, None)
        self.pseq_out = snap.phead
        self.pn_out, self.pts_out = (None, 0) if mine is None else (mine.pn, mine.pts)
        reset = outcome == _RESET
        memo = snap.memo
        key = ("recent", count, reset, self.use_msgpack, self.online, self.likes,
               pace.interval_ms)
        found = memo.get(key)
        if found is None:
            delivery = recent(snap, count, self._polls.answer_bytes_max)
            found = self._keep(memo, key, delivery, answer.head(
                snap.room, snap.epoch, delivery, reset=reset, online=self.online,
                interval_ms=pace.interval_ms, use_msgpack=self.use_msgpack, likes=self.likes))
        self._send(snap.epoch, found[0], found[1], now_ms, outcome, snap)

    @staticmethod
    def _keep(memo: dict[object, tuple[Delivery, bytes]], key: object, delivery: Delivery,
              head: bytes) -> tuple[Delivery, bytes]:
        if len(head) <= MEMO_BYTES_MAX:
            if len(memo) >= MEMO_MAX:
                memo.clear()
            memo[key] = (delivery, head)
        return delivery, head

    def _hold_recent(self, snap: Snapshot, pace: Pace, now_ms: int) -> None:
        """Hold a first poll or a reset in the room's ticker until due, at the
        snapshot's heads (on the clock's monotonic time)."""
        polls, params = self._polls, self.params
        self.held_as, self.recent = HOLD_RECENT, snap
        due = polls.clock.monotonic() + (pace.due_ms - now_ms) / 1000
        self.held_poll = polls.holds.hold_paced(
            params.room, params.uid, snap, self, epoch=snap.epoch, seq=snap.head, iseq=snap.head,
            pending=True, due=due, deadline=due)
        if self.held_poll is None:  # not held (shutting down): released at once
            self._released(snap)

    def _hold_plain(self, snap: Snapshot) -> None:
        self.held_as = HOLD_PLAIN
        kept = self._polls.holds.hold(self.params.room, self.params.uid, snap, self, self.deadline)
        if isinstance(kept, HeldPoll):
            self.held_poll = kept
            self._tell_if_missed(snap.epoch)
        else:
            # Released at once: with the room's newer snapshot (it moved on
            # since ``snap``), or without one (not held: shutting down).
            self._released(kept)

    def _hold_paced(self, snap: Snapshot, cursor: Cursor, pace: Pace, now_ms: int, *,
                    pending: bool) -> None:
        """Hold in the room's ticker until due (or an important message cuts
        through), on the clock's monotonic time."""
        polls, params = self._polls, self.params
        if self.held_as is None:
            # Held the first time: due and the timeout count from now; held
            # again after a wake-up, the poll keeps them.
            mono = polls.clock.monotonic()
            self.due = mono + (pace.due_ms - now_ms) / 1000
            self.paced_deadline = mono + params.timeout
        self.held_as = HOLD_PACED
        self.held_poll = polls.holds.hold_paced(
            params.room, params.uid, snap, self, epoch=cursor.epoch, seq=cursor.seq,
            iseq=cursor.iseq, pending=pending, due=self.due, deadline=self.paced_deadline)
        if self.held_poll is None:  # not held (shutting down): released at once
            self._released(None)
        elif not pending:  # a poll with messages pending shows the news when due
            self._tell_if_missed(cursor.epoch)

    def _tell_if_missed(self, epoch: str) -> None:
        """Just held in a room whose news changed lately: if the listener's
        last answer showed other figures than the room has now (a change
        landed between that answer and this poll), the room's news is told
        at its next turn, and this poll with it (``proxy.polls.news``)."""
        polls, params = self._polls, self.params
        news = polls.news
        room = params.room
        if news is None or not news.lately(room):
            return
        cursor = params.cursor
        ctx = None if cursor is None else self._context(cursor)
        if polls.missed_news(room, epoch, ctx, self.likes):
            news.changed(room)

    def wake(self, snapshot: Snapshot | None) -> None:
        """The hold released this poll: answer it, or hold it again."""
        self.held_poll = None
        if self.done:
            return
        try:
            self._released(snapshot)
        except Exception as exc:
            self.fail(exc)

    def _released(self, snap: Snapshot | None) -> None:
        """The hold released the poll with the room's snapshot to answer from,
        or without one; its answer counts who is online now."""
        polls, params = self._polls, self.params
        pace = self.pace
        assert pace is not None
        cursor = params.cursor
        if snap is not None and cursor is not None and snap.epoch != cursor.epoch:
            # Released into another epoch: the reader's snapshot is the
            # newest, whatever the hold's copy says (asked only then).
            newest = polls.reader.peek(params.room)
            if newest is not None and newest.epoch != snap.epoch:
                snap = newest
        self.online = polls.stats.online(params.room)
        # The likes of the epoch the answer will be in.
        if snap is not None:
            epoch = snap.epoch
        elif self.held_as == HOLD_RECENT and self.recent is not None:
            epoch = self.recent.epoch
        else:
            epoch = ABSENT_EPOCH if cursor is None else cursor.epoch
        self.likes = polls.likes_of(params.room, epoch)
        if snap is not None and snap.epoch != ABSENT_EPOCH and cursor is not None \
                and cursor.epoch == ABSENT_EPOCH:
            # Held before the room existed (no heartbeat then): an operator
            # opened it, so the listener counts from now, not its next poll.
            polls.heartbeats.beat(params.room, params.uid, self.trusted(cursor))
            polls.reader.read_by(params.room, params.uid)
        now_ms = int(polls.clock.time() * 1000)
        held_as = self.held_as
        self._take(step(snap, cursor, pace, now_ms, held_as=held_as), snap, now_ms, held_as)

    def holding(self) -> bool:
        """Whether the hold has it now."""
        return self.held_poll is not None

    def release(self) -> None:
        """Answer now what the hold would answer when it ran out (a poll not
        held is left to finish on its own): its client half-closed and
        waits for nothing more."""
        if self.held_poll is not None and not self.done:
            self._polls.holds.cancel(self.held_poll)
            self.wake(None)

    def cancel(self) -> None:
        """The client left: forget the poll, answer nothing."""
        if self.done:
            return
        self.done = True
        if self.held_poll is not None:
            self._polls.holds.cancel(self.held_poll)
            self.held_poll = None
        if self.task is not None:
            self.task.cancel()
            self.task = None

    # -- answering -------------------------------------------------------------

    def _send(self, epoch: str, delivery: Delivery, head: bytes, now_ms: int, outcome: int,
              snap: Snapshot) -> None:
        """A non-empty answer (or a first one) from ``snap``: a new interval starts now."""
        polls, params = self._polls, self.params
        tally = polls.tally
        tally[outcome] += 1
        if delivery.important:
            tally[_IMPORTANT] += len(delivery.important)
        if delivery.messages:
            tally[_NORMAL] += len(delivery.messages)
        if delivery.personal:
            tally[_PERSONAL] += len(delivery.personal)
        room = params.room
        slow = polls.slow_of(room)
        use_msgpack = self.use_msgpack
        ranking, version = polls.ranking_field(room, params.ranking, use_msgpack, epoch)
        ctx = polls.signer.sign_ascii(room, params.uid, epoch, delivery.seq, delivery.iseq,
                                      delivery.seq_ic, delivery.iseq_ic, now_ms, self.pn_out,
                                      _anchor(delivery, snap),
                                      polls.marks.of(self.likes, slow, version), self.pts_out)
        self.finish(Reply(200, answer.finish(head, ctx, use_msgpack, self._spread(),
                                             self.pseq_out, delivery.personal, delivery.pgap,
                                             ranking, slow),
                           MSGPACK if use_msgpack else JSON))

    def _empty(self) -> None:
        """An answer with no snapshot to read (a hold released without one:
        its node stopping): what the poll had read pending, if anything
        (else the listener's own cursors and epoch, unchanged), and the time
        of its last non-empty answer kept in its new ``ctx``."""
        polls, params = self._polls, self.params
        cursor, delivery, pace = params.cursor, self.last, self.pace
        assert cursor is not None
        assert delivery is not None
        assert pace is not None
        last_ms = pace.last_ms if self.checked else self._check(
            cursor, int(polls.clock.time() * 1000))
        polls.tally[_EMPTY] += 1
        room = params.room
        slow = polls.slow_of(room)
        ranking, version = polls.ranking_field(room, params.ranking, self.use_msgpack,
                                               cursor.epoch)
        # The message the context names is the one at the delivery's seq: a
        # paced poll released without a snapshot (its node stopping) answers
        # what it had pending, and its listener's old anchor names another
        # seq's (simulator, redis seed 81239: a fresh node then took no
        # notice of a message a Redis restart lost).
        anchor = _anchor(delivery)
        if not anchor and delivery.seq == cursor.seq and self.ctx is not None:
            anchor = self.ctx.anchor
        ctx = polls.signer.sign_ascii(room, params.uid, cursor.epoch, delivery.seq,
                                      delivery.iseq, delivery.seq_ic, delivery.iseq_ic, last_ms,
                                      self.pn_out, anchor,
                                      polls.marks.of(self.likes, slow, version), self.pts_out)
        head = answer.head(room, cursor.epoch, delivery, reset=False,
                           online=self.online, interval_ms=pace.interval_ms,
                           use_msgpack=self.use_msgpack, likes=self.likes)
        self.finish(Reply(200, answer.finish(head, ctx, self.use_msgpack, self._spread(),
                                             self.pseq_out, ranking=ranking, slow=slow),
                           MSGPACK if self.use_msgpack else JSON))

    def _spread(self) -> int | None:
        """The listener's routing hint in a vip room (``None`` elsewhere):
        drawn from its uid (stable for it). The one the poll echoed is not
        read: a client cannot choose its hint (so its node) by sending
        another; an honest client echoes this one anyway."""
        polls = self._polls
        n = polls.vip_spread
        if n <= 1 or not polls.is_vip(self.params.room):
            return None
        return zlib.crc32(self.params.uid.encode()) % n

    def finish(self, reply: Reply) -> None:
        if self.done:
            return
        self.done = True
        self._reply(reply)
