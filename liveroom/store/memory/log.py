"""The message log in memory: one :class:`_RoomLog` per room, expired on the
store's clock, and the rate counters beside it."""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from operator import attrgetter
from typing import Final

from ...clock import Clock
from ...errors import Forbidden, NewRoomRefused, NotFound
from ...model import (
    RECALL_UID,
    Entry,
    NewMessage,
    recall_notice,
    recall_notice_id,
    recalled_target,
)
from ...personal import NodeCap, Share
from ...ratelimit import (
    RateLimits,
    SenderTally,
    Window,
    horizon_ms,
    refusal,
    sender_tally,
)
from ..base import (
    PERSONAL_PULL,
    RENEWALS_KEPT,
    Appended,
    LogPolicy,
    Pulled,
    PullRequest,
    Recalled,
    new_epoch,
)
from .notifier import MemoryNotifier
from .outbox import MemoryOutbox

_seq: Final = attrgetter("seq")


@dataclass
class _RoomLog:
    """One room's log in the memory engine: its messages, counters and expiry."""

    epoch: str
    used_ms: int
    """When it was created, last sent to or read: with messages, it expires
    ``room_ttl_ms`` after; with none yet, ``empty_room_ttl_ms`` after its creation
    (reads do not move this then, like ``lua/log_touch.lua``)."""
    root: str = ""
    """The epoch its broadcast began with (a renewal keeps it)."""
    renewed: list[str] = field(default_factory=list)
    """The broadcast's renewed epochs, oldest first (the newest
    ``RENEWALS_KEPT``; ``was`` in the meta hash on Redis)."""
    seq: int = 0
    ic: int = 0
    log: deque[Entry] = field(default_factory=deque)
    important: deque[Entry] = field(default_factory=deque)
    dedup: dict[str, tuple[int, int]] = field(default_factory=dict)
    """client_msg_id -> (seq, expires_ms)"""
    pseq: int = 0
    """The personal sequence's newest position."""
    personal: list[Entry] = field(default_factory=list)
    """Retained personal messages, ascending position, from ``pstart`` on
    (those before it were trimmed: compacted away now and then)."""
    pstart: int = 0
    share: Share | None = None
    """Its part of the node's cap on personal messages."""
    ordinals: dict[str, int] = field(default_factory=dict)
    """uid -> personal messages sent to it in the room."""
    pdedup: dict[str, tuple[int, int]] = field(default_factory=dict)
    """client_msg_id -> (position, expires_ms) of personal sends."""
    recalled: dict[int, Recalled] = field(default_factory=dict)
    """The messages of this epoch recalled, by seq (their tombstones are in
    ``log`` and ``important``)."""
    precalled: dict[int, Recalled] = field(default_factory=dict)
    """The personal messages of this epoch recalled, by position (their
    tombstones are in ``personal`` while it keeps them)."""
    live: bool = False
    """Started or ended by an operator: it expires like a room with messages
    (``room_ttl_ms`` after its last use), message or not (``lua/operators_start_broadcast.lua``)."""
    by: str | None = None
    """The uid whose send created it, while nobody else sent or read: it then
    expires ``empty_room_ttl_ms`` after its last send (``lua/log_append.lua``)."""

    @property
    def personal_held(self) -> int:
        return len(self.personal) - self.pstart

    def drop_oldest(self) -> None:
        """Drop the oldest retained personal message (there is one)."""
        self.pstart = start = self.pstart + 1
        if start > 64 and start * 2 > len(self.personal):
            del self.personal[:start]
            self.pstart = 0
        if self.share is not None:
            self.share.dropped(1)

    def clear_personal(self) -> None:
        if self.share is not None:
            self.share.dropped(self.personal_held)
        self.personal, self.pstart = [], 0


class _RoomRates:
    """The rate counters of one room: its senders' (by uid) and its cap's,
    each expiring on the store's clock at its tally's ``expires_ms``, apart
    from the room's log (like Redis's keys of them)."""

    __slots__ = ("cap", "uids")

    def __init__(self) -> None:
        self.uids: dict[str, SenderTally] = {}
        self.cap: SenderTally | None = None

    def live(self, uid: str, now: int) -> SenderTally | None:
        """``uid``'s counts, unless they expired at ``now`` (then forgotten)."""
        tally = self.uids.get(uid)
        if tally is not None and now > tally.expires_ms:
            del self.uids[uid]
            return None
        return tally

    def sweep(self, now: int) -> bool:
        """Forget the counts expired at ``now``; whether none is left."""
        for uid in [u for u, tally in self.uids.items() if now > tally.expires_ms]:
            del self.uids[uid]
        if self.cap is not None and now > self.cap.expires_ms:
            self.cap = None
        return not self.uids and self.cap is None


_TALLY: Final = sender_tally()
"""A sender's tally: at C level where the install built it (``liveroom.tally_c``)."""


class _Kept:
    """The policy's figures an append reads, as native attributes (the policy
    is an interpreted dataclass: each read a lookup by name; docs/development.md,
    "Compiled modules")."""

    __slots__ = ("dedup_ttl_ms", "empty_room_ttl_ms", "important_hard_cap", "important_keep",
                 "important_window_ms", "log_cap", "personal_hard_cap", "room_ttl_ms")

    def __init__(self, policy: LogPolicy) -> None:
        self.log_cap: int = policy.log_cap
        self.room_ttl_ms: int = policy.room_ttl_ms
        self.empty_room_ttl_ms: int = policy.empty_room_ttl_ms
        self.important_window_ms: int = policy.important_window_ms
        self.important_keep: int = policy.important_keep
        self.important_hard_cap: int = policy.important_hard_cap
        self.personal_hard_cap: int = policy.personal_hard_cap
        self.dedup_ttl_ms: int = policy.dedup_ttl_ms


class MemoryLog:
    reads_replicas = False

    def __init__(self, policy: LogPolicy, clock: Clock, notifier: MemoryNotifier) -> None:
        self.policy = policy
        self._kept = _Kept(policy)
        self._clock = clock
        self._notifier = notifier
        self._rooms: dict[str, _RoomLog] = {}
        self.outbox: MemoryOutbox | None = None
        """Where the room actions' webhook events are kept (the store's)."""
        self._node_cap = NodeCap(policy.personal_node_cap)
        # Apart from the rooms, like Redis's own keys: they expire on their own
        # horizon, not the room's TTL.
        self._rates: dict[str, _RoomRates] = {}
        self._horizon_of: tuple[Window, ...] = ()
        self._horizon_ms = 0
        """:func:`horizon_ms` of the last per-uid windows counted (``_horizon_of``)."""

    def _now_ms(self) -> int:
        return int(self._clock.time() * 1000)

    def _expired(self, state: _RoomLog, now: int) -> bool:
        policy = self._kept
        ttl = policy.room_ttl_ms if (state.seq or state.live) and state.by is None \
            else policy.empty_room_ttl_ms
        return now - state.used_ms > ttl

    def _room(self, room: str, *, create: bool, now: int = -1) -> _RoomLog | None:
        if now < 0:
            now = self._now_ms()
        state = self._rooms.get(room)
        if state is not None and self._expired(state, now):
            self._drop(room, state)
            state = None
        if state is None and create:
            epoch = new_epoch()
            state = self._rooms[room] = _RoomLog(epoch=epoch, used_ms=now, root=epoch)
            state.share = self._node_cap.share(state)
        return state

    def sweep(self) -> None:
        """Drop every room idle past its TTL."""
        now = self._now_ms()
        for room, state in [(r, s) for r, s in self._rooms.items() if self._expired(s, now)]:
            self._drop(room, state)
        for room, rates in list(self._rates.items()):
            if rates.sweep(now):
                del self._rates[room]

    def _drop(self, room: str, state: _RoomLog) -> None:
        """Forget an expired room; its personal messages leave the node's count."""
        del self._rooms[room]
        if state.share is not None:
            state.share.release()

    def provisional(self, room: str) -> tuple[str, int] | None:
        """A room of one sender's sender and how long it has left (ms, at
        least 1); ``None`` for any other room (or none): for its stats."""
        state = self._rooms.get(room)
        if state is None or state.by is None:
            return None
        return state.by, max(1, state.used_ms + self.policy.empty_room_ttl_ms - self._now_ms())

    async def open_room(self, room: str) -> str:
        state = self._room(room, create=True)
        assert state is not None
        if state.seq or state.live:
            state.used_ms = self._now_ms()
        return state.epoch

    async def append(self, room: str, message: NewMessage,
                     limits: RateLimits | None = None, *, may_create: bool = True,
                     provisional: bool = False) -> Appended:
        return self.append_at_once(room, message, limits, may_create=may_create,
                                   provisional=provisional)

    def append_at_once(self, room: str, message: NewMessage,
                       limits: RateLimits | None = None, *, may_create: bool = True,
                       provisional: bool = False) -> Appended:
        """:meth:`append` without an await (it never waits here): the sender
        path answers a send without a task. The order of ``log_append.lua``: a
        seen client_msg_id, then the limits (a refused send creates no log),
        then the append and its counts."""
        now = self._now_ms()
        cmid = message.client_msg_id
        state = self._room(room, create=False, now=now)
        if state is not None and cmid is not None:
            seen = (state.dedup if message.to is None else state.pdedup).get(cmid)
            if seen is not None and seen[1] > now:
                return Appended(state.epoch, seen[0], duplicate=True)
        if state is None and not may_create:
            raise NewRoomRefused()
        if limits is not None:
            self._check_limits(room, message, limits, now)
        created = state is None
        if state is None:
            state = self._room(room, create=True, now=now)
            assert state is not None
            state.by = message.uid if provisional else None
        elif state.by is not None and state.by != message.uid:
            state.by = None  # a second sender: a room like any other
        policy = self._kept
        if message.to is not None:
            position = self._append_personal(state, message, now)
            self._count(room, message.uid, limits, message.ts, now)
            self._notifier.publish(room, 0)
            return Appended(state.epoch, position, duplicate=False, created=created)
        state.seq += 1
        state.ic += message.important
        entry = Entry(seq=state.seq, ic=state.ic, uid=message.uid,
                      important=message.important, ts=message.ts, body=message.body,
                      extra=message.extra)
        state.log.append(entry)
        if len(state.log) > policy.log_cap:
            state.log.popleft()
        if message.important:
            kept = state.important
            kept.append(entry)
            oldest_ok = message.ts - policy.important_window_ms
            while len(kept) > policy.important_keep and (
                kept[0].ts < oldest_ok or len(kept) > policy.important_hard_cap
            ):
                kept.popleft()
        if cmid is not None:
            if len(state.dedup) > 4 * policy.log_cap:
                state.dedup = {k: v for k, v in state.dedup.items() if v[1] > now}
            state.dedup[cmid] = (state.seq, now + policy.dedup_ttl_ms)
        state.used_ms = now
        self._count(room, message.uid, limits, message.ts, now)
        self._notifier.publish(room, state.seq)
        return Appended(state.epoch, state.seq, duplicate=False, created=created)

    def _append_personal(self, state: _RoomLog, message: NewMessage, now: int) -> int:
        """Store a personal message (the order of ``log_append.lua``'s); its position."""
        assert message.to is not None
        policy = self._kept
        state.pseq += 1
        n = state.ordinals[message.to] = state.ordinals.get(message.to, 0) + 1
        state.personal.append(Entry(seq=state.pseq, ic=0, uid=message.uid, important=True,
                                    ts=message.ts, body=message.body, to=message.to, n=n,
                                    extra=message.extra))
        if state.share is not None:
            state.share.added(1)
        oldest_ok = message.ts - policy.important_window_ms
        while state.personal_held > policy.important_keep and (
                state.personal[state.pstart].ts < oldest_ok
                or state.personal_held > policy.personal_hard_cap):
            state.drop_oldest()
        self._node_cap.enforce()
        cmid = message.client_msg_id
        if cmid is not None:
            if len(state.pdedup) > 4 * policy.log_cap:
                state.pdedup = {k: v for k, v in state.pdedup.items() if v[1] > now}
            state.pdedup[cmid] = (state.pseq, now + policy.dedup_ttl_ms)
        state.used_ms = now
        return state.pseq

    def _count(self, room: str, uid: str, limits: RateLimits | None, ts: int,
               now: int) -> None:
        """Count an accepted send at ``ts`` in the windows of ``limits``
        (``now``: the store's clock, from which the counts expire)."""
        if limits is None:
            return
        per_uid, cap = limits.per_uid, limits.room_windows
        if not per_uid and not cap:
            return
        rates = self._rates.get(room)
        if rates is None:
            rates = self._rates[room] = _RoomRates()
        if per_uid:
            tally = rates.live(uid, now)
            if tally is None:
                tally = rates.uids[uid] = _TALLY()
            tally.count(per_uid, ts)
            if per_uid is not self._horizon_of:  # the node's windows, as a rule
                self._horizon_of, self._horizon_ms = per_uid, horizon_ms(per_uid)
            tally.expires_ms = now + self._horizon_ms
        if cap:
            tally = rates.cap
            if tally is None or now > tally.expires_ms:
                tally = rates.cap = _TALLY()
            tally.count(cap, ts)
            tally.expires_ms = now + horizon_ms(cap)

    def _check_limits(self, room: str, message: NewMessage, limits: RateLimits,
                      now: int) -> None:
        """Raise RateLimited when a window of the sender or of the room is full
        at ``message.ts`` (the one freeing last names the error)."""
        rates = self._rates.get(room)
        if rates is None:
            return  # nothing counted: every window has a place
        ts = message.ts
        worst: tuple[str | None, Window, int] | None = None
        per_uid = limits.per_uid
        if per_uid:
            tally = rates.live(message.uid, now)
            full = None if tally is None else tally.refused(per_uid, ts)
            if full is not None:
                worst = message.uid, full[0], full[1]
        cap = limits.room_windows
        if cap and rates.cap is not None and now <= rates.cap.expires_ms:
            full = rates.cap.refused(cap, ts)
            if full is not None and (worst is None or full[1] > worst[2]):
                worst = None, full[0], full[1]
        if worst is not None:
            raise refusal(room, worst[0], worst[1], worst[2], ts)

    async def pull(self, requests: Sequence[PullRequest]) -> list[Pulled]:
        return [self._pull_one(request) for request in requests]

    def _pull_one(self, request: PullRequest) -> Pulled:
        state = self._room(request.room, create=False)
        if state is None:
            return Pulled(request.room, None, 0, 0, (), complete=True)
        after = request.after
        log = state.log
        # The log is dense: the entry with seq s sits at index s - first.
        first = log_first = log[0].seq if log else state.seq + 1
        start = max(0, after + 1 - first)
        newer = max(0, len(log) - start)
        take = min(newer, request.limit)
        picked = [log[i] for i in range(len(log) - take, len(log))]
        complete = take == newer and first <= after + 1
        floor = picked[0].seq if picked else state.seq + 1
        extra = [e for e in state.important if after < e.seq < floor]
        # Found by bisection: a pull costs what it returns, not what the room holds.
        kept = state.personal
        first = bisect_right(kept, request.pafter, lo=state.pstart, key=_seq)
        personal = kept[first:first + PERSONAL_PULL]
        phead = personal[-1].seq if len(personal) == PERSONAL_PULL else state.pseq
        # What the reader holds at its positions is what this log holds there
        # (a memory log is never rewritten under its epoch: it is lost whole);
        # checked all the same, as the redis engine does, a recalled
        # message's tombstone by the ts it keeps.
        rewritten = False
        if request.anchor_ts and 0 <= (at := after - log_first) < len(log):
            rewritten = log[at].ts != request.anchor_ts
        if request.panchor_ts and first > state.pstart \
                and kept[first - 1].seq == request.pafter:
            rewritten = rewritten or kept[first - 1].ts != request.panchor_ts
        return Pulled(request.room, state.epoch, state.seq, state.ic,
                      tuple(extra + picked), complete=complete, phead=phead,
                      personal=tuple(personal), rewritten=rewritten, root=state.root)

    async def recall(self, room: str, seq: int, *, at_ms: int, personal: bool = False,
                     sender: str | None = None, since_ms: int = 0,
                     event: bytes | None = None) -> Recalled:
        return self.recall_at_once(room, seq, at_ms=at_ms, personal=personal, sender=sender,
                                   since_ms=since_ms, event=event)

    def recall_at_once(self, room: str, seq: int, *, at_ms: int, personal: bool = False,
                       sender: str | None = None, since_ms: int = 0,
                       event: bytes | None = None) -> Recalled:
        """:meth:`recall` without an await (``lua/log_recall.lua``'s order):
        the message is found and checked, then its tombstone takes its place
        and its notice is appended by :meth:`append_at_once`, with nothing
        awaited between them (one step, as the script is)."""
        state = self._room(room, create=False)
        if state is None:
            raise NotFound(f"room {room} has no messages")
        done = (state.precalled if personal else state.recalled).get(seq)
        if done is None:
            done = self._recallable(room, state, seq, personal)
        if sender is not None and (done.uid != sender or done.ts < since_ms or done.important):
            raise Forbidden(f"uid {sender} can recall only its own normal messages, and only "
                            f"for a while after sending them")
        if done.notice:
            return done  # recalled before: the same answer, no second notice
        self._put_tombstone(state, done)
        notice = NewMessage(uid=RECALL_UID, important=True, ts=at_ms, to=done.to,
                            body=recall_notice(seq, done.uid, done.important, done.ts,
                                               done.ic, done.n),
                            client_msg_id=recall_notice_id(seq, personal=personal))
        appended = self.append_at_once(room, notice, may_create=False)
        done = replace(done, notice=appended.seq)
        (state.precalled if personal else state.recalled)[seq] = done
        if self.outbox is not None:
            self.outbox.keep(room, event, uid=done.uid, to=done.to if personal else None)
        return done

    @staticmethod
    def _recallable(room: str, state: _RoomLog, seq: int, personal: bool) -> Recalled:
        """What the tombstone of message ``seq`` (``personal``: of the
        personal message at that position) keeps, with no notice yet; raise
        NotFound when the room keeps no such message."""
        if personal:
            kept = state.personal
            at = bisect_right(kept, seq, lo=state.pstart, key=_seq) - 1
            entry = kept[at] if at >= state.pstart else None
            if entry is None or entry.seq != seq or recalled_target(entry):
                raise NotFound(f"room {room} keeps no personal message {seq} (too old, or "
                               f"never sent)")
            assert entry.to is not None
            return Recalled(seq, entry.uid, True, entry.ts, 0, entry.to, entry.n)
        log = state.log
        at = seq - log[0].seq if log else -1
        entry = log[at] if 0 <= at < len(log) else next(
            (e for e in state.important if e.seq == seq), None)
        if entry is None or recalled_target(entry):
            raise NotFound(f"room {room} keeps no message {seq} (too old, or never sent)")
        return Recalled(seq, entry.uid, entry.important, entry.ts, entry.ic)

    @staticmethod
    def _put_tombstone(state: _RoomLog, done: Recalled) -> None:
        """Put the tombstone ``done`` describes where its message is kept."""
        seq = done.seq
        tombstone = Entry(seq=seq, ic=done.ic, uid=done.uid, important=done.important,
                          ts=done.ts, body=None, to=done.to, n=done.n)
        if done.to is not None:
            kept = state.personal
            at = bisect_right(kept, seq, lo=state.pstart, key=_seq) - 1
            if at >= state.pstart and kept[at].seq == seq:
                kept[at] = tombstone
            return
        log = state.log
        at = seq - log[0].seq if log else -1
        if 0 <= at < len(log):
            log[at] = tombstone
        if done.important:
            important = state.important
            for i, e in enumerate(important):
                if e.seq == seq:
                    important[i] = tombstone
                    break

    def start_room(self, room: str) -> tuple[str, bool]:
        """Make the room live (``lua/operators_start_broadcast.lua``), creating its log if it has
        none; return its epoch and whether the log was created."""
        created = self._room(room, create=False) is None
        state = self._room(room, create=True)
        assert state is not None
        state.live, state.by, state.used_ms = True, None, self._now_ms()
        return state.epoch, created

    def root_of(self, room: str) -> str:
        """The broadcast (its first epoch) the room's log is of ("": none)."""
        state = self._rooms.get(room)
        return "" if state is None else state.root

    def epochs_of(self, room: str) -> list[str]:
        """The room's broadcast's epochs: the renewed ones it keeps and the
        current one, oldest first (none: it has no log)."""
        state = self._room(room, create=False)
        return [] if state is None else [*state.renewed, state.epoch]

    def start_epoch(self, room: str) -> tuple[str, int]:
        """Give the room a new epoch with an empty log whatever its current one
        (creating its log if it has none; seq goes on) and make it live; return
        the epoch and the room's head."""
        state = self._room(room, create=True)
        assert state is not None
        state.epoch = state.root = new_epoch()
        state.renewed.clear()
        state.log.clear()
        state.important.clear()
        state.recalled.clear()
        state.precalled.clear()
        state.clear_personal()
        state.live, state.by, state.used_ms = True, None, self._now_ms()
        return state.epoch, state.seq

    async def renew_epoch(self, room: str, stale: str) -> str:
        state = self._room(room, create=True)
        assert state is not None
        if state.epoch == stale:
            # Still its broadcast's: the end records it (MemoryOperators).
            state.renewed = [*state.renewed, stale][-RENEWALS_KEPT:]
            state.epoch = new_epoch()
        return state.epoch

    async def touch(self, rooms: Sequence[str],
                    readers: Mapping[str, Collection[str]] | None = None) -> None:
        now = self._now_ms()
        for room in rooms:
            state = self._room(room, create=False)
            if state is None or not (state.seq or state.live):
                continue
            if state.by is not None and readers is not None and all(
                    uid == state.by for uid in readers.get(room, ())):
                continue  # read by its sender alone: still its sender's room
            state.used_ms = now
            state.by = None  # read by somebody else: a room like any other


# -- statsvr's tables -----------------------------------------------------------
