"""The KV store's interfaces: what every engine promises.

Two engines implement them side by side: :mod:`.memory` (the embedded default,
one process) and :mod:`.redis` (many processes and hosts, Redis or Redis
Cluster). One contract test suite (``tests/test_store_contract.py``) runs against
both, so the memory engine is a faithful stand-in.

Every method may raise :class:`~liveroom.errors.StoreUnavailable` and nothing
else from the driver.
"""

from __future__ import annotations

import base64
import heapq
import os
import random
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from ..model import MAX_INT, Entry, NewMessage, is_digits, is_name, is_room
from ..model import Appended as Appended  # the store's answer, kept in a compiled module
from ..ratelimit import RateLimits
from ..settings import (
    DEDUP_TTL,
    EMPTY_ROOM_TTL,
    HISTORY_TTL,
    IMPORTANT_HARD_CAP,
    IMPORTANT_KEEP,
    IMPORTANT_WINDOW,
    LOG_CAP,
    PERSONAL_HARD_CAP,
    PERSONAL_NODE_CAP,
    ROOM_TTL,
)

_EPOCHS = random.Random()  # seeded from os.urandom
# A worker forked from a node draws its own epochs, not its parent's.
os.register_at_fork(after_in_child=_EPOCHS.seed)


def new_epoch() -> str:
    """A fresh opaque epoch: 72 random bits (12 characters of URL-safe base64),
    so a lost and restarted log never repeats one. Drawn from a generator
    seeded from the system's entropy at start (and again in a forked worker),
    not from ``os.urandom`` each time: the Redis engine proposes one with
    every append (used only if the append creates the log), and a
    ``getrandom`` system call each was a tenth of a send's CPU there."""
    return base64.urlsafe_b64encode(_EPOCHS.getrandbits(72).to_bytes(9, "big")).decode()


@dataclass(frozen=True, slots=True)
class LogPolicy:
    """How much of a room's log the store keeps, and for how long."""

    log_cap: int = LOG_CAP
    """Messages kept per room log (the newest; older ones are trimmed)."""
    important_keep: int = IMPORTANT_KEEP
    important_window_ms: int = int(IMPORTANT_WINDOW * 1000)
    """Important messages are kept while among the newest ``important_keep`` *or*
    younger than this, beyond ``log_cap`` (bounded by ``important_hard_cap``)."""
    important_hard_cap: int = IMPORTANT_HARD_CAP
    personal_hard_cap: int = PERSONAL_HARD_CAP
    """Personal messages are kept like important ones (the newest
    ``important_keep`` and those younger than ``important_window_ms``), up
    to ``personal_hard_cap`` of a room."""
    personal_node_cap: int = PERSONAL_NODE_CAP
    """The memory engine holds at most this many personal messages, all its
    rooms together (the oldest go first). The redis engine keeps them per
    room only: each node bounds its own cache."""
    room_ttl_ms: int = int(ROOM_TTL * 1000)
    """A room with no send and no read for this long expires."""
    empty_room_ttl_ms: int = int(EMPTY_ROOM_TTL * 1000)
    """A log an operator created (or opened) with no message yet expires this
    long after its creation, reads or not: a made-up name costs minutes, not
    days. Its first message extends it to ``room_ttl_ms``."""
    dedup_ttl_ms: int = int(DEDUP_TTL * 1000)
    """How long a ``client_msg_id`` is remembered."""
    durable_replicas: int = 0
    """Replicas that must hold a message before its send is acknowledged (the
    redis engine's ``WAIT``; 0: the master alone, replicated asynchronously).
    The memory engine has no replicas and ignores it."""
    durable_timeout_ms: int = 1_000
    """How long an append waits for ``durable_replicas``; a send still short
    of them is answered 503 (stored or not: retry with its client_msg_id)."""
    history_ttl_ms: int = int(HISTORY_TTL * 1000)
    """How long a room's counters (its broadcast's likes and gifts, see
    :class:`Counters`) and its moderation (:class:`Moderation`: longer while
    a sanction lasts) live after their last write: the viewers history's
    keeping (``--history-ttl``)."""


@dataclass(frozen=True, slots=True)
class Recalled:
    """A recalled message: what its tombstone keeps (everything but its body)."""

    seq: int
    uid: str
    important: bool
    ts: int
    ic: int
    """Important messages in the room up to and including it (0: personal)."""
    to: str | None = None
    """A personal message's addressee (then ``seq`` is its position)."""
    n: int = 0
    """A personal message's ordinal for its addressee."""


@dataclass(frozen=True, slots=True)
class PullRequest:
    room: str
    after: int
    """Return entries with a seq greater than this."""
    limit: int
    """At most this many of the newest log entries (important ones beyond it
    are still returned while the store retains them)."""
    pafter: int = 0
    """Return personal messages with a position greater than this (the
    oldest first, at most :data:`PERSONAL_PULL` of them)."""


PERSONAL_PULL = 10_000
"""Most personal messages one pull of a room returns: a node that starts
serving a busy room catches up over several pulls, none of them huge."""


@dataclass(frozen=True, slots=True)
class Pulled:
    """A room's log after a position, as one read of the store saw it."""

    room: str
    epoch: str | None
    """``None`` when the room has no log (never written, expired or lost)."""
    head: int
    head_ic: int
    entries: tuple[Entry, ...]
    """Ascending seq, all after the request's ``after``: the newest ``limit``
    log entries, plus every retained important entry after ``after``."""
    complete: bool
    """True when no entry in ``(after, head]`` is missing from ``entries``."""
    undecodable: int = 0
    """Entries in ``(after, head]`` the engine read but could not decode (a
    corrupt stream entry): left out of ``entries``, so readers count them in
    ``gap`` like evicted ones."""
    phead: int = 0
    """The room's personal sequence as far as ``personal`` reaches: the
    position of the last personal message returned, or the room's newest
    when every retained one after ``pafter`` was."""
    personal: tuple[Entry, ...] = ()
    """Retained personal messages after the request's ``pafter``, ascending
    position (their ``seq``), each with its addressee's ordinal ``n``."""


class MessageLog(Protocol):
    """One log per room with a dense ``seq`` and an opaque ``epoch``.

    - ``append`` is atomic and one round trip: client_msg_id dedup, next seq,
      the entry (with its important count ``ic``), retention of important
      entries, expiry refresh, and the notify to every recvsvr.
    - A personal message (``NewMessage.to``) takes no seq: it takes the next
      position of the room's *personal sequence* and the next ordinal ``n``
      of its addressee in the room (both go on across epochs, like seq, and
      restart only when the log was lost), and is kept like an important
      one, up to ``personal_hard_cap``. Its
      notify carries seq 0 ("pull me"), never a seq.
    - A room's ``epoch`` changes when its log was lost (a store restarted empty,
      expiry) and on :meth:`renew_epoch`; seqs restart from 1 in a new epoch
      only when the log was lost.
    - ``pull`` only reads. With ``reads_replicas`` it reads replicas, which
      may lag behind each other: a pull may then see less than one before it.
    """

    reads_replicas: bool

    async def open_room(self, room: str) -> str:
        """The room's epoch, creating an empty log if it has none.

        Only operator actions call it (a vip add): a poll never creates a log.
        A log created here lives ``empty_room_ttl_ms`` until its first message."""

    async def append(self, room: str, message: NewMessage,
                     limits: RateLimits | None = None, *, may_create: bool = True,
                     provisional: bool = False) -> Appended:
        """Store one message and notify; a seen ``client_msg_id`` stores nothing.

        With ``may_create`` false, a send to a room with no log raises
        :class:`~liveroom.errors.NewRoomRefused` and stores nothing. With
        ``provisional``, a log this send creates (``Appended.created``) is its
        sender's alone: it expires ``empty_room_ttl_ms`` after that sender's
        last send until another uid sends to it or :meth:`touch` counts a
        read of it by another uid (then ``room_ttl_ms``, as any room).

        With ``limits``, the sender's windows (per room and ``message.uid``) and
        the room's cap are checked in the same round trip, at ``message.ts``:
        over any of them nothing is stored or counted and
        :class:`~liveroom.errors.RateLimited` is raised with ``retry_after``
        (seconds until the first send would be accepted again). Only stored
        sends count; a repeated ``client_msg_id`` answers as before, uncounted.
        """

    async def pull(self, requests: Sequence[PullRequest]) -> list[Pulled]:
        """Read several rooms in one batch (one round trip on Redis)."""

    async def recall(self, room: str, seq: int, *, personal: bool = False,
                     sender: str | None = None, since_ms: int = 0) -> Recalled:
        """Put message ``seq``'s tombstone in its place (``personal``: the
        personal message at position ``seq``): its body is gone
        from the store, and every later pull returns the entry with body
        ``None`` (its seq, ic, uid, lane and ts kept) wherever it returned the
        message. Atomic, one round trip; recalling a recalled message answers
        the same again.

        It does not tell anyone: the caller appends the recall's notice
        (``model.recall_notice``, an important entry of
        ``model.RECALL_UID``), which every reader of the room then sees; on
        Redis a pull that holds the notice puts the tombstone where the
        message was, and one that holds the message holds the notice (it is
        newer, and important). A personal message's notice is a personal
        message to its addressee: a pull that reads the notice reads the
        tombstone too. Raises :class:`~liveroom.errors.NotFound`
        when the room keeps no such message (never sent, trimmed, a notice
        itself, or the room has no log); with ``sender``,
        :class:`~liveroom.errors.Forbidden` unless the message is that
        uid's, sent at or after ``since_ms``."""

    async def renew_epoch(self, room: str, stale: str) -> str:
        """Give the room a new epoch if it is still ``stale``; return the current one."""

    async def touch(self, rooms: Sequence[str],
                    readers: Mapping[str, Collection[str]] | None = None) -> None:
        """Count a read of these rooms: push their expiry back (a room with no
        message yet by ``empty_room_ttl_ms`` at most); never creates a log.

        ``readers`` names the uids that read each room (two distinct ones
        are enough; a room missing from it had none known). A room of one
        sender (see :meth:`append`'s ``provisional``) read only by that sender
        is left as it is, its short expiry included: its creator's own polls
        never make it last. Read by another uid it becomes a room like any
        other. ``None``: the readers are not known, and count as somebody
        else (an operator's read)."""


class AppendAtOnce(Protocol):
    """The ``append_at_once`` of a log that never waits to append (the memory
    engine's): :meth:`MessageLog.append`'s arguments, answer and errors,
    without an await, so the sender path answers a send without a task. A
    log offers it as a method of its class; the Redis engines do not."""

    def __call__(self, room: str, message: NewMessage, limits: RateLimits | None = None, *,
                 may_create: bool = True, provisional: bool = False) -> Appended: ...


OnNotify = Callable[[str, int], None]
"""Called with (room, seq) when a room reached seq; seq 0 when the room got
a personal message (its personal sequence moved, not seq)."""


class OnResync(Protocol):
    """Called when notifies may have been lost (after the channel reconnected):
    notifies of ``rooms`` (None: of every room) may be gone, pull them."""

    def __call__(self, rooms: Collection[str] | None = None) -> None: ...


class Notifier(Protocol):
    """At-most-once hints "room R reached seq N" to every recvsvr of the system.

    A notify is only a hint: losing one never loses a message (recvsvr's
    fallback pull covers it). The channel reconnects by itself and calls every
    ``on_resync`` after it did, since notifies sent meanwhile are gone. A
    room's notifies arrive in the order of its appends; notifies of different
    rooms have no order between them (a cluster's shards publish apart).
    """

    def subscribe(self, on_notify: OnNotify, on_resync: OnResync) -> None: ...

    def watch(self, room: str) -> None:
        """This node reads ``room`` from now on: an engine that delivers a
        room's notifies only where asked (a cluster's sharded channels)
        subscribes it. Counted: each call is undone by one :meth:`unwatch`."""

    def unwatch(self, room: str) -> None:
        """This node no longer reads ``room`` (see :meth:`watch`)."""

    def hears(self, room: str) -> bool:
        """Whether notifies of ``room`` reach this node now (watched, and
        the subscription confirmed where an engine subscribes per room)."""

    @property
    def alive(self) -> bool:
        """Whether the channel is connected and answered its last probe."""


class Store(Protocol):
    """An engine: the message log, the notifier and shared values, with a lifecycle."""

    name: str

    # Read-only members, so an engine may declare its own concrete classes.
    @property
    def log(self) -> MessageLog: ...

    @property
    def notifier(self) -> Notifier: ...

    @property
    def stats(self) -> StatsStore: ...

    @property
    def operators(self) -> Operators: ...

    @property
    def counters(self) -> Counters: ...

    @property
    def moderation(self) -> Moderation: ...

    async def start(self) -> None:
        """Connect and start background tasks (notify listener, probes, expiry)."""

    async def close(self) -> None:
        """Stop background tasks and disconnect."""

    async def ping(self) -> None:
        """Raise StoreUnavailable unless the store answers now."""


# -- statsvr's tables ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ShardWrite:
    """One shard of one room as a statsvr node holds it, to store or refresh.

    A node's shard ``index`` of ``count`` holds the room's members whose
    shard hash (``statsvr.table.shard_of``) is ``index``. The stored value is
    replaced whole.
    """

    room: str
    index: int
    count: int
    """How many shards the node splits this room into (1, or ``vip_shards``)."""
    version: str
    """Changes whenever the members change; unique across node restarts."""
    size: int
    """Members in the shard. 0 drops the shard (key and index entry)."""
    members: bytes | None
    """msgpack array of the members' uids, sorted; ``None`` when the members did
    not change since the last write: only the expiry (and ``trusted``) is
    pushed."""
    trusted: int = 0
    """Members the automatic vip rule may count (at most ``size``): those the
    proxy vouched for (a ticket, or a second poll with the signed ``ctx`` it
    was given: ``proxy.polls.poll``). Stored in the index entry, beside ``size``."""


@dataclass(frozen=True, slots=True)
class ShardEntry:
    """A live shard of a room, as the room's shard index lists it."""

    node: str
    index: int
    count: int
    version: str
    size: int
    expires_ms: int
    trusted: int = 0
    """Its members the vip rule may count (``ShardWrite.trusted``); ``size``
    for an entry an older node wrote (no such count: all were counted)."""


@dataclass(frozen=True, slots=True)
class ViewersState:
    """A room's viewers history as stored."""

    exact: int
    """Uids in the room's exact set."""
    complete: bool
    """False once the exact set hit its threshold and stopped growing."""
    sketches: tuple[bytes, ...]
    """Every node's HyperLogLog registers (empty when not asked for)."""
    broadcast: int = 1
    """The room's current broadcast (see ``Operators.end_broadcast``)."""


@dataclass(frozen=True, slots=True)
class OnlineSample:
    """One sample of a room's online count, for every resolution of its series."""

    room: str
    t_ms: int
    online: int


RANKED_ROOMS_MAX = 100
"""Rooms one node lists in an announcement, at most (its biggest)."""


@dataclass(frozen=True, slots=True)
class RankedRoom:
    """A room in a node's announcement of its biggest rooms."""

    room: str
    online: int
    per_minute: float | None
    """Messages sent a minute lately (see ``liveroom.snapshot.sent_per_minute``);
    ``None`` when the announcing node did not hold the room's messages."""


@dataclass(frozen=True, slots=True)
class NodeLoad:
    """What a node holds, as it announces it."""

    rooms_cached: int = 0
    """Rooms in its recvsvr caches (both sects)."""
    held_polls: int = 0
    """Polls its proxy holds now."""
    members: int = 0
    """Online listeners whose heartbeats its statsvr keeps."""
    rooms_merged: int = 0
    """Rooms whose online view its statsvr merges."""


@dataclass(frozen=True, slots=True)
class Announcement:
    """What a statsvr node tells the node registry each time it announces itself."""

    load: NodeLoad = NodeLoad()
    rooms: tuple[RankedRoom, ...] = ()
    """Its biggest rooms (at most :data:`RANKED_ROOMS_MAX`), each listed by the
    one node that samples its online series (``statsvr.sampler.writer_of``)."""


@dataclass(frozen=True, slots=True)
class NodeState:
    """A live node as the registry holds it."""

    node: str
    announced_ms: int
    expires_ms: int
    announcement: Announcement


SeriesRow = tuple[int, int, int, int, int]
"""``(start, min, max, sum, count)`` of one stored bucket."""


def series_horizon_ms(resolutions: Sequence[tuple[int, int]], min_gap_ms: int) -> int:
    """Check ``record_online``'s arguments; return how long a series lives after
    its last sample (the longest retention, in ms; 0 without resolutions).

    Raises ``ValueError`` for a step that is not positive, a retention shorter
    than its step, or a negative gap.
    """
    if min_gap_ms < 0 or any(step <= 0 or retention < step for step, retention in resolutions):
        raise ValueError(
            f"bad series arguments: resolutions {resolutions!r}, min_gap_ms {min_gap_ms}")
    return max((retention for _, retention in resolutions), default=0) * 1000


def biggest(announcements: Iterable[Announcement], limit: int) -> list[RankedRoom]:
    """The ``limit`` biggest rooms listed in ``announcements``: online
    descending, then room name; a room listed twice counts once, with its
    larger figure (the rule of ``StatsStore.biggest_rooms`` on every engine)."""
    best: dict[str, RankedRoom] = {}
    for announcement in announcements:
        for ranked in announcement.rooms:
            held = best.get(ranked.room)
            if held is None or ranked.online > held.online:
                best[ranked.room] = ranked
    return heapq.nsmallest(limit, best.values(), key=lambda r: (-r.online, r.room))


class StatsStore(Protocol):
    """What statsvr keeps in the KV store: shard tables, viewers history, series.

    Time given in ``*_ms`` arguments is the caller's clock (Unix ms), so every
    node and every engine agrees on expiry even under a test's fake clock.
    """

    async def write_shards(self, node: str, writes: Sequence[ShardWrite],
                           now_ms: int, ttl_ms: int) -> list[tuple[str, int]]:
        """Store or refresh ``node``'s shards: one round trip for the batch.

        Each written or refreshed shard's index entry says it lives until
        ``now_ms + ttl_ms``; readers ignore it after that (and the key itself
        is dropped some time later). A refresh sets the entry's ``trusted``
        too (the count can change while the members do not). Entries of any
        node that expired are
        pruned from the rooms written. Returns the ``(room, index)`` of shards
        that were only to be refreshed but are gone from the store (flushed, or
        expired while this node stalled): the caller writes them whole again.
        """

    async def shard_index(self, rooms: Sequence[str], now_ms: int) -> list[list[ShardEntry]]:
        """The live shards of each room (expired ones left out), one round trip."""

    async def read_shards(self, room: str, entries: Sequence[ShardEntry],
                          max_bytes: int | None = None) -> list[bytes | None]:
        """The members blobs of these shards of one room, one round trip;
        ``None`` for a shard gone meanwhile. With ``max_bytes``, only the
        first ``max_bytes`` bytes of each (a blob is a msgpack array of
        sorted uids, so a prefix holds the first members): a shorter answer
        is the whole blob."""

    async def add_viewers(self, room: str, node: str, uids: Sequence[str],
                          sketch: bytes | None, threshold: int,
                          ttl_ms: int) -> tuple[int, bool, int]:
        """Count ``uids`` as viewers of ``room``'s current broadcast and store
        ``node``'s sketch.

        Atomically adds the uids to the room's exact set, in order, until it
        would exceed ``threshold`` uids; then the set is marked incomplete and
        never grows again. ``sketch`` (when given) replaces ``node``'s own
        HyperLogLog registers of the room, but only once the set is incomplete
        (this call or an earlier one made it so): below the threshold the exact
        set is the whole truth, and no 16 KiB sketch is stored. Callers keep
        their sketch fed from the start and pass it every time, so the first
        one stored covers every uid the node saw. The room's history lives ``ttl_ms``
        after its last update; no longer than its log then has left when the
        room is one sender's (see :meth:`MessageLog.append`'s ``provisional``)
        and ``uids`` are that sender alone, so a room nobody else read leaves
        no history behind (another uid's join keeps ``ttl_ms``: its read makes
        the room last).
        Returns the set's size, whether it is complete,
        and the broadcast written to: a caller that finds it changed wrote its
        old broadcast's sketch into the new one, and writes a fresh one.
        """

    async def load_sketch(self, room: str, node: str) -> bytes | None:
        """``node``'s stored HyperLogLog registers of ``room``'s current
        broadcast, if any."""

    async def viewers(self, rooms: Sequence[str], *,
                      sketches: Sequence[bool]) -> list[ViewersState]:
        """The viewers history of each room's current broadcast (and its
        number), one round trip; every node's sketch of a room is read only
        where ``sketches`` says so."""

    async def record_online(self, samples: Sequence[OnlineSample],
                            resolutions: Sequence[tuple[int, int]], min_gap_ms: int) -> int:
        """Add each sample to its bucket in every resolution ``(step s, retention s)``.

        A bucket keeps ``(min, max, sum, count)``; buckets older than a resolution's
        retention (relative to the sample) are dropped, and the series lives as
        long as the longest retention after its last sample (a room of one
        sender's, no longer than its log then has left: the samples after
        the room came to last keep it). A sample less than
        ``min_gap_ms`` after the room's last stored sample is skipped, so two
        nodes briefly both sampling a room do not double it. One round trip;
        returns how many samples were taken.
        """

    async def read_online(self, room: str, step: int, low: int, high: int) -> list[SeriesRow]:
        """The ``step``-second buckets of ``room`` whose start is in ``[low, high]``,
        oldest first."""

    async def announce(self, node: str, now_ms: int, ttl_ms: int,
                       announcement: Announcement | None = None) -> list[str]:
        """Say that statsvr ``node`` is alive until ``now_ms + ttl_ms``; return
        every live node (sorted), this one included.

        ``announcement`` (what the node holds, its biggest rooms) replaces the
        one the node made before, whole: a room it no longer lists is gone
        from :meth:`biggest_rooms` at once. ``None`` stores an empty one. Nodes
        whose time passed are dropped, with their announcements. One round trip.
        """

    async def withdraw(self, node: str) -> None:
        """Take ``node`` and its announcement out of the registry at once (a
        node that stops; one that dies just stops announcing)."""

    async def nodes(self, now_ms: int) -> list[NodeState]:
        """The live nodes (expiring at or after ``now_ms``) with their last
        announcement, sorted by node. One round trip; read-only."""

    async def biggest_rooms(self, now_ms: int, limit: int) -> list[RankedRoom]:
        """The ``limit`` biggest rooms by online count over every live node's
        announcement: online descending, then room name. A room two nodes list
        (its writer changing hands) appears once, with the larger count. One
        round trip; read-only; costs the live nodes times what each lists
        (at most :data:`RANKED_ROOMS_MAX`), never a walk over rooms.
        """


# -- operators ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ended:
    """A broadcast an operator ended."""

    epoch: str
    """The room's new epoch (every listener resets into it)."""
    broadcast: int
    """The number of the broadcast that starts now (the first one is 1)."""


@dataclass(frozen=True, slots=True)
class Started:
    """A room an operator started (or found started)."""

    epoch: str
    """The room's epoch (unchanged when it already had a log)."""
    broadcast: int
    """The room's current broadcast (the first one is 1)."""
    created: bool
    """True when the room had no log and starts now."""


@dataclass(frozen=True, slots=True)
class PastBroadcast:
    """An ended broadcast whose viewers history (and counters) are still kept."""

    broadcast: int
    ended_ms: int
    viewers: ViewersState
    likes: int = 0
    """The broadcast's likes total when it ended (0 in an archive written
    before counters existed)."""
    gifts: int = 0
    """Its gift total (the sum of the gifts' values)."""
    ranking: tuple[tuple[str, int], ...] = ()
    """Its top givers (at most :data:`RANKING_KEPT`) with their scores, in
    :meth:`Counters.leaderboard`'s order."""
    moderation: tuple[AuditEntry, ...] = ()
    """Its moderation audit (:meth:`Moderation.audit`), newest first, at most
    :data:`AUDIT_KEPT` entries (empty in an archive of before moderation)."""


@dataclass(frozen=True, slots=True)
class VipSwap:
    """Replace ``room``'s sect record, if it is still ``before``."""

    room: str
    before: bytes
    after: bytes
    vip: bool


class Operators(Protocol):
    """What operators (and the automatic vip rule) change: the rooms' sect
    records and the start and end of a broadcast."""

    async def vip_records(self) -> dict[str, bytes]:
        """Every room's sect record (:mod:`liveroom.sects` encodes them), by
        room: the rooms with none are normal. A room whitelisted by a version
        that kept no records has ``b""``. One round trip; nodes keep them and
        never read them per poll."""

    async def vip_swap(self, swaps: Sequence[VipSwap]) -> list[bool]:
        """Apply each swap whose ``before`` is the room's record now (``b""``:
        none), each atomically: the record becomes ``after`` (``b""``: none)
        and the room is in the whitelist iff ``vip``. True for each applied."""

    async def start_broadcast(self, room: str) -> Started:
        """Open ``room`` before its first message: a room with no log gets one
        (a new epoch at seq 0, its listeners notified); a room with a log keeps
        it. Either way the room is *live*: it lives ``room_ttl_ms`` and reads
        keep it alive like a room with messages, so a node counts its listeners
        online (and as viewers) from the first poll. Idempotent; atomic.
        """

    async def end_broadcast(self, room: str, now_ms: int, ttl_ms: int) -> Ended:
        """End the room's broadcast: a new epoch with an empty log (the ended
        broadcast's messages are dropped; seqs go on) and a new viewers
        history. Atomic, and always effective: ending twice ends two broadcasts.

        The room gets a new epoch unconditionally (a log is created if it has
        none), so every listener resets, into no recent messages; the room is
        live afterwards, as after :meth:`start_broadcast`. The broadcast number goes up by one
        (a room never ended is in broadcast 1). The ended broadcast's viewers
        history is set aside and stays readable (:meth:`broadcasts`) for
        ``ttl_ms`` (on the store's clock, like every expiry of the engine);
        ``now_ms`` is recorded as when it ended. So are, in the same atomic
        step, its counters (:class:`Counters`): its likes total, gift total
        and top :data:`RANKING_KEPT` givers; the new broadcast's likes, gifts
        and ranking start at zero (the likes series, the room's by time,
        goes on); and its moderation audit (:meth:`Moderation.audit`), the
        new broadcast's starting empty (mutes, bans and slow mode are the
        room's, not the broadcast's: they stay). ``StatsStore.viewers`` and
        ``add_viewers`` work on the new, empty history from now on and report
        the new number, so a statsvr node forgets whom it had counted. Every
        recvsvr is notified with the room's head, as after an append.
        """

    async def broadcasts(self, room: str) -> list[PastBroadcast]:
        """The room's ended broadcasts still kept, newest first, with their
        viewers history as stored (sketches included, ``broadcast`` their number),
        their counters and their moderation audit (zero and empty in an
        archive of before them)."""


# -- counters: likes and gifts ---------------------------------------------------


SERIES_RESOLUTIONS: tuple[tuple[int, int], ...] = (
    (60, 86_400),
    (300, 7 * 86_400),
    (3_600, 90 * 86_400),
)
"""``(step s, retention s)`` of every series a room keeps, finest first: the
online series' table (``statsvr.series.DEFAULT_RESOLUTIONS`` is built from
it) and the likes series' (:meth:`Counters.add_likes`). 1-minute buckets for
a day, 5-minute buckets for a week, 1-hour buckets for 90 days."""

GIFT_VALUE_MAX = 10**12
"""The largest value of one gift (:meth:`Counters.add_gift`)."""
LEADERBOARD_MAX = 100
"""The most givers one :meth:`Counters.leaderboard` lists."""
RANKING_KEPT = 100
"""Givers an ended broadcast's archive keeps (``PastBroadcast.ranking``)."""
SCORE_EXACT = 2**53
"""Scores and totals are exact below this (the redis engine ranks with a
sorted set, whose scores are doubles); no broadcast comes near it (9 000
gifts of :data:`GIFT_VALUE_MAX` from one giver)."""


@dataclass(frozen=True, slots=True)
class GiftRank:
    """A giver's place after a gift, in the room's current broadcast."""

    rank: int
    """1 for the top giver (see :meth:`Counters.leaderboard` for ties)."""
    score: int
    """The giver's sum of gift values in this broadcast."""
    total: int
    """The room's gift total in this broadcast, this gift included."""


@dataclass(frozen=True, slots=True)
class Leaderboard:
    """The top givers of a room's current broadcast."""

    top: tuple[tuple[str, int], ...]
    """``(giver, score)``, best first."""
    total: int
    """The sum of every gift's value in the broadcast."""
    count: int
    """Gifts given in the broadcast."""


def check_taps(taps: Mapping[str, int]) -> None:
    """Raise ``ValueError`` unless every room's taps are an int of at least 1."""
    for room, n in taps.items():
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"taps of room {room!r} must be an int of at least 1, not {n!r}")


def check_gift(value: int) -> None:
    """Raise ``ValueError`` unless ``value`` is an int in 1..:data:`GIFT_VALUE_MAX`."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= GIFT_VALUE_MAX:
        raise ValueError(f"a gift's value must be an int in 1..{GIFT_VALUE_MAX}, not {value!r}")


def check_limit(limit: int) -> None:
    """Raise ``ValueError`` unless ``limit`` is an int in 1..:data:`LEADERBOARD_MAX`."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= LEADERBOARD_MAX:
        raise ValueError(f"limit must be an int in 1..{LEADERBOARD_MAX}, not {limit!r}")


def bucket_start(t_ms: int, step: int) -> int:
    """The start (Unix s) of the ``step``-second bucket holding ``t_ms``: the
    rule of ``statsvr.series.Resolution.start`` on integer ms."""
    return t_ms // (1000 * step) * step


def bucket_horizon(start: int, step: int, retention: int) -> int:
    """The oldest bucket start kept when the newest is ``start``
    (``statsvr.series.Resolution.horizon``)."""
    return start - (retention // step - 1) * step


class Counters(Protocol):
    """A room's likes and gifts, per broadcast (``Operators.end_broadcast``
    archives them and starts the next broadcast at zero).

    - **Likes** are merged by the caller: a node adds a room's taps in memory
      and hands the sum since its last flush to :meth:`add_likes`, so store
      writes do not grow with the tap rate. A room's total and its likes
      series move together, atomically per room: a reader never sees a
      partial add.
    - **Gifts** are exact: each giver's score and the room's total and count
      move together in one atomic step per gift.
    - **Expiry**: a room's totals and ranking live
      ``LogPolicy.history_ttl_ms`` after their last write, its likes series
      the longest retention of :data:`SERIES_RESOLUTIONS` after its last
      add (like the online series), so a dead room's counters go.
    - Every call is one round trip (the memory engine never suspends).
    """

    async def add_likes(self, taps: Mapping[str, int], now_ms: int) -> None:
        """Add each room's taps (an int of at least 1) to its current
        broadcast's total and to the likes series: each ``(step, retention)``
        of :data:`SERIES_RESOLUTIONS` sums the taps of the ``step``-second
        bucket holding ``now_ms`` and keeps the buckets of the last
        ``retention`` seconds (relative to ``now_ms``, as
        ``StatsStore.record_online`` does). The series is the room's, by
        time: a broadcast's end does not reset it (its buckets are minutes
        of the room, whatever broadcast they fell in).

        All rooms in one round trip (on a cluster, one per node, sent
        together); atomic per room, not across rooms. Raises ``ValueError``
        (storing nothing) for taps that are not an int of at least 1."""

    async def likes(self, rooms: Sequence[str]) -> dict[str, int]:
        """The current broadcast's likes total of each room (0 for a room with
        none, or whose counters expired), one round trip."""

    async def read_likes(self, room: str, step: int, low: int,
                         high: int) -> list[tuple[int, int]]:
        """``(bucket start, taps)`` of the ``step``-second likes buckets of
        ``room`` whose start (Unix s, like ``StatsStore.read_online``) is in
        ``[low, high]``, oldest first; buckets without taps are absent."""

    async def add_gift(self, room: str, giver: str, value: int, gift: str,
                       now_ms: int) -> GiftRank:
        """Add ``value`` (1..:data:`GIFT_VALUE_MAX`) to ``giver``'s score in
        the room's current broadcast, to the room's gift total and one to its
        gift count, atomically; return the giver's rank, score and the total.

        ``gift`` (its name) and ``now_ms`` are not stored: the store keeps
        sums, not a ledger (the caller logs or sends gifts it must keep).
        Raises ``ValueError`` for a value out of range."""

    async def leaderboard(self, room: str, limit: int) -> Leaderboard:
        """The ``limit`` (1..:data:`LEADERBOARD_MAX`) top givers of the room's
        current broadcast with their scores, and its gift total and count.

        Order: score descending; givers with equal scores by name
        *descending* (code point order, which is UTF-8 byte order): the order
        of Redis's ``ZREVRANGE``, which every engine follows, so a rank is the
        same everywhere. Read-only, one round trip."""

    async def rankings(self, rooms: Sequence[str], limit: int) -> dict[str, Leaderboard]:
        """The :meth:`leaderboard` of each room with a gift in its current
        broadcast (the others absent from the answer): all rooms in one round
        trip (on a cluster, one per node, sent together). Nodes read the rooms
        their listeners poll, once a second, for the ranking in answers."""


# -- moderation: mutes, bans, slow mode and their audit ----------------------------


MODERATION_ACTIONS = ("mute", "unmute", "ban", "unban", "slow", "recall")
"""What :meth:`Moderation.act` does (``AuditEntry.action``)."""
SANCTION_SECONDS_MAX = 30 * 86_400
"""The longest mute or ban (and slow mode's longest gap), in seconds: 30 days."""
REASON_MAX = 200
"""The longest reason, in characters."""
AUDIT_KEPT = 1_000
"""Audit entries a room keeps per broadcast (the newest), and
:meth:`Moderation.audit`'s largest ``limit``."""
SANCTIONS_MAX = 10_000
"""Mutes a room holds at most, and bans apart (expired ones do not count):
:meth:`Moderation.act` refuses one more (:class:`SanctionsFull`)."""
JOURNAL_PRUNED = 100
"""Rooms whose moderation ended one :meth:`Moderation.act` takes out of the
journal, at most (the oldest ends first): an act's cost stays bounded."""

SANCTIONED_BY_ROLE = ("admin", "publisher")
"""Who gives a sanction (``Sanction.by``), besides ``"uid:<sender>"``."""


@dataclass(frozen=True, slots=True)
class Sanction:
    """A mute or a ban of one uid in one room."""

    uid: str
    until_ms: int
    """When it ends (the caller's clock, Unix ms); 0: until lifted."""
    reason: str
    by: str
    """Who gave it: ``"admin"``, ``"publisher"`` or ``"uid:<sender>"``."""
    at_ms: int
    """When it was given (its audit entry's ``at_ms``)."""


@dataclass(frozen=True, slots=True)
class RoomModeration:
    """A room's moderation now, as :meth:`Moderation.rooms` reads it."""

    muted: tuple[Sanction, ...]
    """Sorted by uid; expired ones (``until_ms`` not 0 and at most the
    reader's ``now_ms``) left out."""
    banned: tuple[Sanction, ...]
    """The same, for bans."""
    slow: int
    """Seconds between two normal messages of one uid; 0: off."""
    version: int
    """The system's moderation version at the room's last change (0: never,
    or not yet known: see :meth:`Moderation.act` on a cluster)."""


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One moderation action, as given to :meth:`Moderation.act` and as the
    room's audit keeps it."""

    at_ms: int
    """When it was taken (the caller's clock, Unix ms)."""
    by: str
    """Who: ``"admin"``, ``"publisher"`` or ``"uid:<sender>"``."""
    action: str
    """One of :data:`MODERATION_ACTIONS`."""
    target: str
    """The uid; for ``"recall"`` the message's ``"<lane>:<seq>"``; ``""``
    for ``"slow"``."""
    seconds: int
    """The duration given: a mute's or ban's (0: a ban until lifted), slow
    mode's gap (0: lifted); 0 for ``unmute``, ``unban`` and ``recall``."""
    reason: str


class SanctionsFull(ValueError):
    """The room holds :data:`SANCTIONS_MAX` mutes (or bans) in force: one
    more uid was refused and nothing was stored. Not bad input but the
    room's state (a ``ValueError`` all the same): the caller answers 409,
    and lifting some makes room."""


def check_room(room: object) -> str:
    """Return ``room`` if it is a valid room name, else raise ``ValueError``."""
    if not isinstance(room, str) or not is_room(room):
        raise ValueError(f"room must match [A-Za-z0-9_.-]{{1,64}} (not only dots): {room!r}")
    return room


def _check_int(what: str, value: object, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{what} must be an int in {low}..{high}, not {value!r}")


def check_act(room: str, entry: AuditEntry, now_ms: int) -> None:
    """Raise ``ValueError`` unless :meth:`Moderation.act` may apply ``entry``
    to ``room`` (its rules are the ones listed there)."""
    check_room(room)
    if not isinstance(entry, AuditEntry):
        raise ValueError(f"an action must be an AuditEntry, not {entry!r}")
    _check_int("now_ms", now_ms, 0, MAX_INT)
    _check_int("at_ms", entry.at_ms, 0, MAX_INT)
    action, target, seconds, by = entry.action, entry.target, entry.seconds, entry.by
    if action not in MODERATION_ACTIONS:
        raise ValueError(f"action must be one of {', '.join(MODERATION_ACTIONS)}, "
                         f"not {action!r}")
    if not isinstance(by, str) or not (
            by in SANCTIONED_BY_ROLE or (by.startswith("uid:") and is_name(by[4:]))):
        raise ValueError(f"by must be 'admin', 'publisher' or 'uid:<uid>', not {by!r}")
    if action == "slow":
        ok_target = target == ""
    elif action == "recall":
        lane, sep, seq = target.partition(":") if isinstance(target, str) else ("", "", "")
        ok_target = bool(sep) and is_name(lane) and is_digits(seq)
    else:
        ok_target = isinstance(target, str) and is_name(target)
    if not ok_target:
        raise ValueError(f"target of {action} must be "
                         + {"slow": "''", "recall": "'<lane>:<seq>'"}.get(
                             action, "a uid, [A-Za-z0-9_.-]{1,64}") + f", not {target!r}")
    low = 1 if action == "mute" else 0
    high = 0 if action in ("unmute", "unban", "recall") else SANCTION_SECONDS_MAX
    _check_int(f"seconds of {action}", seconds, low, high)
    reason = entry.reason
    if not isinstance(reason, str) or len(reason) > REASON_MAX:
        raise ValueError(f"reason must be text of at most {REASON_MAX} characters")
    try:
        reason.encode()
    except UnicodeEncodeError:
        raise ValueError("reason must be text UTF-8 can hold (no lone surrogate)") from None


def check_audit_limit(limit: int) -> None:
    """Raise ``ValueError`` unless ``limit`` is an int in 1..:data:`AUDIT_KEPT`."""
    _check_int("limit", limit, 1, AUDIT_KEPT)


def check_since(since: int) -> None:
    """Raise ``ValueError`` unless ``since`` is a version (an int of at least 0)."""
    _check_int("since", since, 0, 2**63 - 1)


def sanction_until(entry: AuditEntry, now_ms: int) -> int:
    """When a mute or ban given at ``now_ms`` ends: ``seconds`` later, or 0
    (until lifted) for a ban of 0 seconds."""
    return now_ms + entry.seconds * 1000 if entry.seconds else 0


def in_force(sanction: Sanction, now_ms: int) -> bool:
    """Whether ``sanction`` still holds at ``now_ms``: until lifted, or ending
    after it."""
    return sanction.until_ms == 0 or sanction.until_ms > now_ms


def moderation_lives_ms(ttl_ms: int, last_until_ms: int | None, now_ms: int) -> int | None:
    """How long a room's moderation is kept after a write at ``now_ms``:
    ``ttl_ms`` (``LogPolicy.history_ttl_ms``), or until its last sanction in
    force ends (``last_until_ms``, 0: a ban until lifted: ``None``, kept
    until lifted) when that is later. The rule of ``moderate.lua``."""
    if last_until_ms == 0:
        return None
    if last_until_ms is None:
        return ttl_ms
    return max(ttl_ms, last_until_ms - now_ms)


class Moderation(Protocol):
    """Each room's mutes, bans and slow mode, its audit, and the system-wide
    journal of changes that lets every node keep a copy of them.

    - **Atomic per room.** :meth:`act` applies one action and records it in
      the room's audit in one atomic step (on one Redis: with the journal
      too; on a Redis Cluster, see below).
    - **The journal.** Every act bumps the system's moderation *version* (one
      counter) and notes the room as changed at it. Nodes call
      :meth:`changed` every ~250 ms with the version they last saw and read
      the rooms it names with :meth:`rooms`: a change is noted only after
      the room's state holds it, so a node never misses one. A room leaves
      the journal when its moderation is no longer kept (see expiry), at the
      first act after that (any room's, at most :data:`JOURNAL_PRUNED` rooms
      each): until then :meth:`changed` may still name it, and :meth:`rooms`
      finds nothing.
    - **Expiry.** Sanctions end by the caller's clock (``now_ms``, as the
      rest of the store): an ended one is absent from :meth:`rooms` at once
      and pruned from the store by the room's next act. A room's moderation
      (sanctions, slow mode, audit) is kept ``LogPolicy.history_ttl_ms``
      after its last act, or until its last sanction ends when that is
      later, or for as long as it holds a ban until lifted (the store's own
      expiry, like every other key's): slow mode set and never touched
      again ends with it.
    - **Broadcasts.** ``Operators.end_broadcast`` archives the room's audit
      with the ended broadcast (``PastBroadcast.moderation``) and starts an
      empty one; mutes, bans and slow mode are the room's and stay.
    - **Limits.** At most :data:`SANCTIONS_MAX` mutes in force per room and as
      many bans (:class:`SanctionsFull` beyond); the newest
      :data:`AUDIT_KEPT` audit entries per broadcast. Input that breaks a
      rule raises ``ValueError`` and stores nothing.
    - **Redis Cluster.** A room's state is in its slot and the journal in the
      global one, so :meth:`act` is three steps: the room's script, then the
      journal's (the version and the note, together), then the version
      stamped into the room's state. A step that fails raises
      :class:`~liveroom.errors.StoreUnavailable` with the steps before it
      done: the change applied but not yet noted (nodes learn it at the
      room's next act), or noted with the room's ``version`` behind.
      Retrying the act is harmless: the same state again (a mute or ban
      counted from the retry's ``now_ms``), a new version, and no second
      audit entry (an entry equal to the audit's newest is not recorded
      again, on every engine).
    """

    async def act(self, room: str, entry: AuditEntry, now_ms: int) -> int:
        """Apply one action to ``room`` and record ``entry`` in its audit, at
        ``now_ms`` (the caller's clock); return the new moderation version.

        - ``mute`` and ``ban`` set ``entry.target``'s mute (ban), replacing
          one in force: ``Sanction(until_ms=now_ms + seconds * 1000, reason,
          by, at_ms=entry.at_ms)``; a ban of 0 seconds lasts until lifted, a
          mute needs at least 1 second. A mute and a ban of one uid are
          apart: lifting one leaves the other.
        - ``unmute`` and ``unban`` lift it (nothing to lift is no error; the
          act is recorded all the same).
        - ``slow`` sets the room's slow mode to ``seconds`` (0 lifts it).
        - ``recall`` changes nothing but the audit (``target`` names the
          message, ``"<lane>:<seq>"``: the caller removes it).

        Raises ``ValueError``, storing nothing, for: a room or uid that is not
        a name (``[A-Za-z0-9_.-]{1,64}``, a room not only dots), an action not
        in :data:`MODERATION_ACTIONS`, ``by`` not ``"admin"``,
        ``"publisher"`` or ``"uid:<uid>"``, a recall's target not
        ``"<lane>:<seq>"`` (a name, digits), slow's not ``""``, ``seconds``
        out of 0..:data:`SANCTION_SECONDS_MAX` (1.. for a mute, 0 for
        ``unmute``, ``unban`` and ``recall``), a reason over
        :data:`REASON_MAX` characters, ``at_ms`` or ``now_ms`` not an int
        in 0..2**53-1. Raises :class:`SanctionsFull` (a ``ValueError``,
        storing nothing) for a new uid's mute (ban) when the room holds
        :data:`SANCTIONS_MAX` in force."""

    async def rooms(self, rooms: Sequence[str], now_ms: int) -> dict[str, RoomModeration]:
        """The moderation of each room at ``now_ms``: sanctions in force and
        slow mode; a room with none is absent from the answer. One round trip
        (one per cluster node on a cluster, sent together); read-only.
        Raises ``ValueError`` for a room that is not a name."""

    async def changed(self, since: int) -> tuple[int, list[str]]:
        """The current version and the rooms changed after version ``since``,
        oldest change first (each once, at its last change); ``since`` 0
        lists every room in the journal: each whose moderation is kept. A
        ``since`` above the current version (the store lost its journal:
        a flushed or replaced Redis) answers as 0 does. One round trip,
        atomic; read-only."""

    async def audit(self, room: str, limit: int) -> list[AuditEntry]:
        """The room's audit in its current broadcast, newest first, at most
        ``limit`` (1..:data:`AUDIT_KEPT`; ``ValueError`` otherwise) entries.
        One round trip; read-only."""
