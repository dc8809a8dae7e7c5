"""The message log on Redis: a meta hash and two streams per room (keys in
:mod:`.keys`, scripts in ``lua/``); see the package docstring for what Redis
adds and takes away."""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Mapping, Sequence
from operator import attrgetter
from typing import Any

import msgpack
from redis.asyncio.client import Pipeline
from redis.asyncio.cluster import ClusterPipeline, RedisCluster
from redis.exceptions import RedisError

from ...codec import pack_stored, unpack_stored
from ...errors import Forbidden, NewRoomRefused, NotFound, StoreUnavailable
from ...model import (
    RECALL_UID,
    Entry,
    NewMessage,
    recall_notice_id,
    recalled_target,
    tombstone_of,
)
from ...ratelimit import RateLimits, Window, refusal
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
from . import keys
from .calls import Batched, Client, Lua, run_durable, run_scripts, text, unavailable

logger = logging.getLogger("liveroom.store.redis")

_PULL_ATTEMPTS = 5

_REFUSED = 2
_NOT_CREATED = 3
"""``log_append.lua``'s status of a send refused by a rate window."""


def _room_keys(room: str) -> list[str]:
    return [keys.meta(room), keys.log(room), keys.important(room), keys.personal(room),
            keys.ordinals(room)]


def _seq_of(stream_id: bytes) -> int:
    return int(stream_id.partition(b"-")[0])


def _entry(stream_id: bytes, fields: dict[bytes, bytes]) -> Entry | None:
    """The entry, or None when it cannot be decoded (written by something else,
    or corrupt): one bad entry must cost its own message, never the room."""
    try:
        return unpack_stored(_seq_of(stream_id), int(fields[b"c"]), fields[b"m"])
    except Exception:  # whatever garbage raises: msgpack, int(), a missing field
        return None


def _personal(stream_id: bytes, fields: dict[bytes, bytes]) -> Entry | None:
    """A personal message of ``lr:{R}:pm``, or None when it cannot be decoded."""
    try:
        entry = unpack_stored(_seq_of(stream_id), 0, fields[b"m"], int(fields[b"n"]))
    except Exception:  # whatever garbage raises
        return None
    return entry if entry.to is not None else None


REMAP_EVERY = 10.0
"""Seconds between two looks at a replica-reading client's slot map while a
slot in it has no replica (see :meth:`RedisLog._remap_replicas`)."""


class RedisLog:
    """The message log on Redis: a meta hash and two streams per room."""

    def __init__(self, client: Client, policy: LogPolicy, *, sharded: bool = False,
                 reader: Client | None = None) -> None:
        self.policy = policy
        self.sharded = sharded
        self._client = client
        self._reader = reader or client
        self.reads_replicas = reader is not None
        """Where pulls read: the replicas, when appends wait for them (see
        :class:`RedisStore`)."""
        self._looked_at = float("-inf")
        self._append = Lua("log_append.lua", uses=["log_new.lua", "log_append_fn.lua"])
        self._appends = Batched(client)
        """Appends of concurrent sends, one pipeline a loop turn."""
        self._epoch = Lua("log_epoch.lua", uses=["log_new.lua"])
        self._touch = Lua("log_touch.lua")
        self._recall = Lua("log_recall.lua", uses=["log_new.lua", "log_append_fn.lua",
                                                     "room_event_fn.lua"])

    async def _room_epoch(self, what: str, room: str, stale: str, extend: int) -> str:
        with unavailable(what):
            (epoch,) = await run_scripts(self._client, [(
                self._epoch, _room_keys(room),
                [new_epoch(), stale, self.policy.room_ttl_ms, extend,
                 self.policy.empty_room_ttl_ms, RENEWALS_KEPT])])
        return text(epoch)

    async def close(self) -> None:
        """Wait for the appends in flight (before the client closes)."""
        await self._appends.close()

    async def open_room(self, room: str) -> str:
        return await self._room_epoch("opening a room", room, "", 1)

    async def append(self, room: str, message: NewMessage,
                     limits: RateLimits | None = None, *, may_create: bool = True,
                     provisional: bool = False) -> Appended:
        """One script call (``lua/log_append.lua``): dedup, rate windows, append, notify."""
        policy = self.policy
        cmid = message.client_msg_id
        to = message.to
        packed = pack_stored(message.uid, message.important, message.ts, message.body, to,
                             message.extra)
        proposed = new_epoch()
        per_uid = limits.per_uid if limits is not None else ()
        per_room = limits.room_windows if limits is not None else ()
        windows = (*per_uid, *per_room)
        call = (self._append,
                [keys.meta(room), keys.log(room), keys.important(room),
                 keys.client_msg_id(room, cmid or "", personal=to is not None),
                 keys.rate_uid(room, message.uid), keys.rate_room(room),
                 keys.personal(room), keys.ordinals(room)],
                self._append_args(room, message, packed, proposed,
                                  (2 if provisional else 1) if may_create else 0,
                                  len(per_uid), windows))
        replicas = policy.durable_replicas
        with unavailable("storing a message"):
            if replicas:
                reply, acked = await run_durable(self._client, call, replicas,
                                                 policy.durable_timeout_ms)
            else:
                reply, acked = await self._appends.run(call), 0
        epoch, seq, status, *refused = reply
        if status == _NOT_CREATED:
            raise NewRoomRefused()
        if status != _REFUSED and acked < replicas:
            # Stored on the master (or seen before), not yet on enough replicas:
            # a failover now could lose it, so it is not acknowledged. The
            # sender retries with its client_msg_id and is answered its seq once
            # the replicas have it.
            raise StoreUnavailable(
                f"the message reached {acked} of {replicas} replicas within "
                f"{policy.durable_timeout_ms} ms; retry with its client_msg_id")
        if status == _REFUSED:
            position, free_ms = int(refused[0]), int(refused[1])
            uid = message.uid if position <= len(per_uid) else None
            raise refusal(room, uid, windows[position - 1], free_ms, message.ts)
        epoch = text(epoch)
        return Appended(epoch, int(seq), duplicate=bool(status), created=epoch == proposed)

    def _append_args(self, room: str, message: NewMessage, packed: bytes, proposed: str,
                     create: int, uid_windows: int, windows: Sequence[Window]) -> list[Any]:
        """``log_append.lua``'s ARGV for ``message`` (``packed``), of which the
        first ``uid_windows`` of ``windows`` are the sender's, the others the
        room's; ``create``: its ARGV[16]."""
        policy = self.policy
        return [proposed, packed, int(message.important), message.ts,
                policy.log_cap, policy.important_keep, policy.important_window_ms,
                policy.important_hard_cap, policy.room_ttl_ms, policy.dedup_ttl_ms,
                int(message.client_msg_id is not None),
                keys.notify_how(room, sharded=self.sharded), room,
                uid_windows, len(windows) - uid_windows, create, policy.empty_room_ttl_ms,
                message.uid, message.to or "", policy.personal_hard_cap,
                *(n for w in windows for n in (w.seconds, w.limit, w.bucket_ms, w.buckets))]

    async def recall(self, room: str, seq: int, *, at_ms: int, personal: bool = False,
                     sender: str | None = None, since_ms: int = 0,
                     event: bytes | None = None) -> Recalled:
        """One script call (``lua/log_recall.lua``: the tombstone, then the
        notice appended by ``log_append.lua``'s own code), waiting for the
        replicas like an append when appends do.

        A recall an older version made in two calls (its tombstone recorded
        without its notice's seq, and perhaps without a notice, if it was cut
        short) gets its notice when it is retried: the notice's client_msg_id
        answers the first one's, or it is appended then."""
        policy = self.policy
        notice_id = recall_notice_id(seq, personal=personal)
        # The script fills in its body and addressee (from the message); it may
        # not create the log, so it proposes no epoch.
        notice = NewMessage(uid=RECALL_UID, body=None, important=True, ts=at_ms,
                            client_msg_id=notice_id)
        call = (self._recall, [keys.meta(room), keys.log(room), keys.important(room),
                               keys.recalled(room), keys.personal(room), keys.ordinals(room),
                               keys.client_msg_id(room, notice_id, personal=personal),
                               keys.events(room)],
                [seq, policy.room_ttl_ms, sender or "", since_ms, int(personal),
                 *self._append_args(room, notice, b"", "", 0, 0, ()), event or b""])
        with unavailable("recalling a message"):
            if policy.durable_replicas:
                reply, acked = await run_durable(self._client, call, policy.durable_replicas,
                                                 policy.durable_timeout_ms)
                if acked < policy.durable_replicas:
                    raise StoreUnavailable("the recall did not reach enough replicas in time; "
                                           "retry it")
            else:
                (reply,) = await run_scripts(self._client, [call])
        status = int(reply[0])
        if not status:
            raise NotFound(f"room {room} keeps no message {seq} (too old, or never sent)")
        if status == 2:
            raise Forbidden(f"uid {sender} can recall only its own normal messages, and only "
                            f"for a while after sending them")
        uid, important, ts, ic, *to_n = msgpack.unpackb(reply[1], raw=False)
        notice_seq = int(reply[2])
        if to_n:
            return Recalled(seq, uid, True, int(ts), 0, to_n[0], int(to_n[1]), notice_seq)
        return Recalled(seq, uid, bool(important), int(ts), int(ic), notice=notice_seq)

    async def pull(self, requests: Sequence[PullRequest]) -> list[Pulled]:
        """One pipeline for the whole batch: four read-only commands a room.

        It reads every retained important entry after ``after`` (at most
        ``important_hard_cap``), also those the log part returns as well; a
        room read across an epoch change is read again in a further pipeline.
        """
        if self.reads_replicas:
            await self._remap_replicas()
        done: dict[int, Pulled] = {}
        todo = await self._drop_absent(requests, done)
        for _ in range(_PULL_ATTEMPTS):
            if not todo:
                break
            with unavailable("reading a room's messages"):
                async with self._reader.pipeline(transaction=False) as pipe:
                    for i in todo:
                        _queue_pull(pipe, requests[i])
                    replies = await pipe.execute()
            again = []
            pos = 0
            for i in todo:
                request = requests[i]
                n = _pull_replies(request)
                pulled = _build_pulled(request, replies[pos:pos + n])
                pos += n
                if pulled is None:
                    again.append(i)
                else:
                    done[i] = pulled
            todo = again
        if todo:
            # Only a room whose log is replaced again and again gets here.
            raise StoreUnavailable("room logs kept changing during a pull; try again")
        return [done[i] for i in range(len(requests))]

    async def _remap_replicas(self) -> None:
        """Map the cluster's slots again when a slot has no replica in the
        reader's map. Redis 7.0 lists a replica in ``CLUSTER SLOTS`` only once
        its master heard its replication offset, so a reader that mapped a fresh
        cluster would read masters until a ``MOVED`` or an error made it map
        again. At most every :data:`REMAP_EVERY` seconds, on the pull's
        background path; a failure is left to the next look."""
        reader = self._reader
        now = time.monotonic()
        if not isinstance(reader, RedisCluster) or now - self._looked_at < REMAP_EVERY:
            return
        self._looked_at = now
        slots = reader.nodes_manager.slots_cache
        if slots and any(len(nodes) < 2 for nodes in slots.values()):
            try:
                await reader.nodes_manager.initialize()
            except (RedisError, OSError) as exc:
                logger.debug("mapping the cluster again failed: %s", exc)

    async def _drop_absent(self, requests: Sequence[PullRequest],
                           done: dict[int, Pulled]) -> list[int]:
        """Answer the first pulls (``after`` 0) of rooms with no log from one
        read of their meta each, into ``done``; return the requests left.

        A node pulls a room from 0 once when it starts serving it, and a
        name nobody ever sent to (a made-up one) would otherwise cost the
        four reads of a full pull. A room created between this read and the
        full pull is seen by the notify of its creation.
        """
        fresh = [i for i, r in enumerate(requests) if r.after == 0]
        if not fresh:
            return list(range(len(requests)))
        with unavailable("reading a room's messages"):
            async with self._reader.pipeline(transaction=False) as pipe:
                for i in fresh:
                    pipe.exists(keys.meta(requests[i].room))
                found = await pipe.execute()
        for i, exists in zip(fresh, found, strict=True):
            if not exists:
                done[i] = Pulled(requests[i].room, None, 0, 0, (), complete=True)
        return [i for i in range(len(requests)) if i not in done]

    async def renew_epoch(self, room: str, stale: str) -> str:
        return await self._room_epoch("renewing a room's epoch", room, stale, 0)

    async def touch(self, rooms: Sequence[str],
                    readers: Mapping[str, Collection[str]] | None = None) -> None:
        """One pipeline of ``lua/log_touch.lua`` calls: a room with no message yet
        keeps the short expiry it was created with, a room with no log stays
        without one, a room of one sender read by that sender alone stays its."""
        if not rooms:
            return
        ttl = self.policy.room_ttl_ms
        with unavailable("keeping rooms alive"):
            await run_scripts(self._client, [
                (self._touch, _room_keys(room),
                 [ttl, 0] if readers is None else [ttl, 1, *readers.get(room, ())])
                for room in rooms])


def _pull_replies(request: PullRequest) -> int:
    """How many commands :func:`_queue_pull` queues for ``request``."""
    return (4 + (request.limit > 0) + 2 * (request.anchor_ts > 0 and request.after > 0)
            + 2 * (request.panchor_ts > 0 and request.pafter > 0))


def _queue_pull(pipe: Pipeline | ClusterPipeline, request: PullRequest) -> None:
    """Queue the reads of one room: 4 commands, one more when ``limit`` > 0
    and two for each anchor to check (the entry at ``after``, at ``pafter``,
    and its tombstone if it was recalled)."""
    room = request.room
    after = f"({request.after}-0"
    pipe.hmget(keys.meta(room), ["epoch", "seq", "ic", "ps", "root"])
    if request.limit > 0:
        pipe.xrevrange(keys.log(room), "+", after, count=request.limit)
    pipe.xrange(keys.important(room), after, "+")
    pipe.xrange(keys.personal(room), f"({request.pafter}-0", "+", count=PERSONAL_PULL)
    if request.anchor_ts > 0 and request.after > 0:
        at = f"{request.after}-0"
        pipe.xrange(keys.log(room), at, at)
        pipe.hget(keys.recalled(room), str(request.after))
    if request.panchor_ts > 0 and request.pafter > 0:
        at = f"{request.pafter}-0"
        pipe.xrange(keys.personal(room), at, at)
        pipe.hget(keys.recalled(room), f"p{request.pafter}")
    pipe.hget(keys.meta(room), "epoch")


def _rewritten(read: list[Any], tombstone: bytes | None, ts: int) -> bool:
    """Whether the entry read at an anchor, or its tombstone when it was
    recalled (``log_recall.lua``'s record ``{uid, important, ts, ...}``), has
    another ts (neither: no evidence). The tombstone counts: a message that
    took a lost one's seq and was recalled before a node read it would
    otherwise leave that node's copy of the lost one unnoticed (simulator,
    redis-sharded seed 90744)."""
    if read:
        sid, fields = read[0]
        entry = _entry(sid, fields) if b"c" in fields else _personal(sid, fields)
        return entry is not None and entry.ts != ts
    if tombstone:
        try:
            kept_ts = int(msgpack.unpackb(tombstone)[2])
        except Exception:  # whatever garbage raises: no evidence
            return False
        return kept_ts != ts
    return False


def _build_pulled(request: PullRequest, replies: list[Any]) -> Pulled | None:
    """One room's Pulled from its replies, or None when its epoch changed meanwhile.

    Mirrors :meth:`MemoryLog._pull_one`: the log returned is the newest
    ``limit`` entries after ``after``, then every retained important entry
    between ``after`` and the oldest of them.
    """
    (epoch, meta_seq, meta_ic, meta_ps, root), *rest = replies
    newest_first: list[Any] = rest.pop(0) if request.limit > 0 else []
    important, personal_read, *anchors, epoch_again = rest
    if epoch != epoch_again:
        return None
    rewritten = False
    if request.anchor_ts > 0 and request.after > 0:
        rewritten = _rewritten(anchors.pop(0), anchors.pop(0), request.anchor_ts)
    if request.panchor_ts > 0 and request.pafter > 0:
        rewritten = _rewritten(anchors.pop(0), anchors.pop(0), request.panchor_ts) \
            or rewritten
    if epoch is None:
        return Pulled(request.room, None, 0, 0, (), complete=True)
    head = int(meta_seq or 0)
    head_ic = int(meta_ic or 0)
    decoded = [_entry(sid, fields) for sid, fields in reversed(newest_first)]
    picked = [e for e in decoded if e is not None]
    undecodable = len(decoded) - len(picked)
    if picked and picked[-1].seq >= head:
        # Appends that landed after the meta was read: the log is newer.
        head, head_ic = picked[-1].seq, picked[-1].ic
    after = request.after
    floor = picked[0].seq if picked else head + 1
    extra = []
    for sid, fields in important:
        entry = _entry(sid, fields)
        if entry is None:
            undecodable += 1
            continue
        if entry.seq >= floor:
            break
        extra.append(entry)
    picked, extra = _with_tombstones(picked, extra, after, floor, request.limit)
    # An undecodable entry is missing from the answer like a trimmed one: the
    # pull is not complete, and readers count it in ``gap``.
    complete = (picked[0].seq == after + 1 if picked else after >= head) \
        and not undecodable
    personal = [e for e in (_personal(sid, fields) for sid, fields in personal_read)
                if e is not None]
    tombstones = [tombstone_of(e) for e in personal if recalled_target(e)]
    if tombstones:
        # Recalled personal messages left the stream; their notices, newer,
        # came in this read: each tombstone goes where its message was.
        have = {e.seq for e in personal}
        back = [t for t in tombstones if t.seq > request.pafter and t.seq not in have]
        if back:
            personal = sorted([*personal, *back], key=attrgetter("seq"))
    phead = int(meta_ps or 0)
    if len(personal_read) == PERSONAL_PULL:
        # Read up to there; the rest comes with the next pull.
        phead = _seq_of(personal_read[-1][0])
    elif personal and personal[-1].seq > phead:
        phead = personal[-1].seq  # appended after the meta was read
    return Pulled(request.room, text(epoch), head, head_ic, tuple(extra + picked),
                  complete=complete, undecodable=undecodable, phead=phead,
                  personal=tuple(personal), rewritten=rewritten,
                  root=text(root) if root is not None else "")



def _with_tombstones(picked: list[Entry], extra: list[Entry], after: int, floor: int,
                     limit: int) -> tuple[list[Entry], list[Entry]]:
    """The log's part and the important part of a pull, each with the
    tombstone of every recalled message a notice among them names, in the
    message's place (``log_recall.lua`` took it out of both streams).

    The log's part is the newest ``limit`` positions up to its newest entry
    (the log is dense but for those holes, which let the read reach further
    back): a tombstone in that stretch goes there, and the entries the holes
    let in below it leave it (the important ones to the important part, as a
    read without the holes would have returned them). A tombstone below the
    stretch goes to the important part if its message was important. Never
    at or before ``after``."""
    tombstones = [tombstone_of(e) for part in (extra, picked) for e in part
                  if recalled_target(e)]
    if not tombstones:
        return picked, extra
    have = {e.seq for part in (extra, picked) for e in part}
    top = picked[-1].seq if picked else floor - 1
    low = max(after, top - limit) if limit > 0 else top
    to_log = [t for t in tombstones if t.seq not in have and low < t.seq <= top]
    to_important = [t for t in tombstones if t.seq not in have and after < t.seq <= low
                    and t.important]
    by_seq = attrgetter("seq")
    if to_log:
        picked = sorted([*picked, *to_log], key=by_seq)
    below = [e for e in picked if e.seq <= low]
    if below:
        picked = picked[len(below):]
        to_important += [e for e in below if e.important]
    if to_important:
        extra = sorted([*extra, *to_important], key=by_seq)
    return picked, extra
