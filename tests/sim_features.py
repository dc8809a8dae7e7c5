"""The newer features in the deterministic simulation (tests/simulation.py):
likes, gifts and the ranking, recalls, mute, ban and slow mode, and nodes
killed, driven by the seed through each node's own objects (the ones the HTTP
routes call), each request's outcome kept in a ledger, and the checks of
what docs/api.md promises of them.

**What the world does** (rates drawn per seed, :class:`Features`):

- *chatters* ``c0``, ``c1``, ...: listeners (polling like the others, so every
  listener check holds for them too) that also send normal messages
  (``Sends.send``, open mode, no token: rate limited and moderated), and
  recall some of their own (``Recalls.recall`` with ``?uid=``);
- *taps*: like requests of any listener's uid (``Taps.tap``, as the front's
  route calls it), 1 to 20 taps each, through any running node;
- *gifts*: the backend's gifts of givers ``g0``..``g5`` (``Gifts.give`` with
  the publisher token, after the room gate the route passes);
- *recalls*: the moderators' and the backend's recalls of recent messages,
  normal, important and personal (``Recalls.recall`` with a token); a recall
  cut short (its node killed while it runs, or a 503) is retried, or not (the
  moderator gave up);
- *moderation*: mutes, bans (timed, so they end before the quiet) and slow
  mode of the chatters (``Moderation.act``, as the admin routes call it);
- *kills*: a node dies (the taps it acknowledged since its last flush are
  lost, the requests it runs are cut short) and starts again; some strike
  while a recall runs through the node.

**What it checks** (:func:`check`), each line a promise of docs/api.md:

- *Likes* ("Likes"): each ended broadcast's archived likes and the current
  broadcast's total equal the taps acknowledged in that broadcast, less those
  a killed node had not written ("a crash loses the taps acknowledged since
  the last write"); "a tap belongs to the broadcast in which it was
  acknowledged", which is the epoch the node's room cache held when it took
  the tap (what the like route reads). Poll answers' ``likes`` "never go
  down within a broadcast" (on one node, between its restarts: an answer is
  that node's total) and never exceed the taps acknowledged in their
  broadcast so far.
- *Gifts* ("Gifts"): each gift's answer is the giver's exact score, rank and
  the total; once the traffic stops every node's leaderboard and every
  node's ranking in answers are the ledger's top givers; each ended
  broadcast's archive keeps its total and ranking.
- *Recalls* ("Moderation", recall): a recall cut short is done with its
  notice or not done (the store holds no tombstone without its notice);
  retried, it answers the same notice; every answer whose cursor passes the
  notice lists the recalled seq (``recalled``, ``precalled`` for a personal
  message) and no answer lists it twice; no answer that reaches the notice
  carries the message's body; a listener that had the body of a message
  whose recall is done is told.
- *Mute, ban, slow mode* ("Moderation"): an action applies on the node it
  went through at once and on every node within a second: a muted or banned
  uid's sends are not stored, its taps and own recalls not taken, a banned
  uid's polls refused, and its polls held when the ban came answered within
  a second; a refusal as muted or banned comes only while such a sanction
  may be in force; in slow mode ``s``, two stored normal messages of one uid
  are a window apart (``s`` seconds, counted in tenths: "a window slides at
  bucket granularity").

**On Redis** (``--engine redis``, ``redis-sharded``) the same actors and
checks run; the ledgers allow what Redis may do, and no more:

- a gift or a moderation action answered 503 may have been done (its reply
  lost after Redis ran it): ``maybe``, allowed and not required; a chatter's
  send carries a ``client_msg_id`` and a 503 is resolved by reading that key
  off the server (:func:`_stored_send`, an oracle read);
- a kill during a write of taps, or with writes that failed and wait to be
  tried again, leaves them maybe written (``unsure``); a node stopped while
  Redis is away loses what it could not write (:func:`stopped`); a kill
  loses at most what the node acknowledged since its last answered write
  began (:class:`FlushedCounters`), not a flush period;
- a restart that loses its last second takes exactly what the counters
  show it took (:func:`counted` before and after, :func:`lost_second`),
  which the likes and gifts checks subtract; the actions, recalls and
  slow-mode sends of that second are not checked (their effect may be gone,
  a lost notice's seq taken again);
- an action reaches every node within :data:`REACH` plus what the world's
  Redis faults may hold a node's reads of the store (``FeatureRun.reach``).

Kept apart from simulation.py so that it changes little there: a few hooks
call :func:`draw_features`, :func:`chatters`, :func:`actors`,
:func:`observe_nodes`, :func:`observe_store` and :func:`check`.
"""

from __future__ import annotations

import asyncio
import bisect
import json
import random
from collections.abc import Coroutine
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Final

from liveroom.errors import LiveroomError, StoreUnavailable
from liveroom.model import RECALL_UID, Entry, recalled_target
from liveroom.snapshot import ABSENT_EPOCH
from liveroom.store.base import RANKING_KEPT, AuditEntry, PastBroadcast, PullRequest, Ranking
from liveroom.store.redis import keys as redis_keys
from proxy.reply import Reply

if TYPE_CHECKING:
    from simulation import SimListener, SimNode, Truth, World

ROOM = "sim"
"""simulation.ROOM (not imported: simulation.py imports this module)."""
GIVERS = 6
REACH = 1.0
"""Seconds within which a moderation action applies on every node
(docs/api.md: "Every action applies on every node within about a second";
a ban's held polls are answered "within a second")."""
RECENT_RECALLED = 30
"""A recall picks among the newest messages the truth knows of."""


@dataclass
class Features:
    """How much of each feature a seed's world has (drawn per seed)."""

    chatters: int = 0
    """Listeners that also send, recall their own and get moderated."""
    send_every: float = 0.0
    """Mean seconds between two sends of a chatter."""
    tap_every: float = 0.0
    """Mean seconds between two like requests (all uids together; 0: none)."""
    gift_every: float = 0.0
    recall_every: float = 0.0
    """Mean seconds between two recalls by a token (0: none)."""
    own_recall: float = 0.0
    """A chatter's chance to recall a message it sent."""
    act_every: float = 0.0
    """Mean seconds between two moderation actions (0: none)."""
    kills: int = 0
    kill_mid_recall: float = 0.0
    """A recall's chance to have its node killed while it runs."""
    retry_recall: float = 0.0
    """A recall cut short's chance to be tried again."""


def draw_features(rng: random.Random) -> Features:
    return Features(
        chatters=rng.choice([0, 1, 2]),
        send_every=rng.choice([0.4, 1.5]),
        tap_every=rng.choice([0.0, 0.1, 0.3]),
        gift_every=rng.choice([0.0, 0.3, 1.5]),
        recall_every=rng.choice([0.0, 1.0, 3.0]),
        own_recall=rng.choice([0.0, 0.3]),
        act_every=rng.choice([0.0, 0.7, 2.0]),
        kills=rng.choice([0, 0, 1, 2]),
        kill_mid_recall=rng.choice([0.0, 0.2]),
        retry_recall=rng.choice([0.0, 0.5, 1.0]),
    )


# -- the ledgers ------------------------------------------------------------------------


@dataclass
class Tap:
    """A like request answered 202."""

    start: float
    at: float
    node: int
    uid: str
    n: int
    epochs: tuple[str, ...]
    """``(E,)``: the epoch the node's room cache held when it took the taps
    (what the route reads); else the store's current epochs when the request
    began and ended (the node had to read the room first)."""
    stale: bool = False
    """Acknowledged by a node that stopped meanwhile (the simulator's stop
    does not wait for requests in flight): maybe never written."""


@dataclass
class Gift:
    at: float
    node: int
    giver: str
    value: int
    epochs: tuple[str, str]
    """The store's current epoch just before and after the store's add."""
    rank: int
    score: int
    total: int
    maybe: bool = False
    """Answered 503 (on Redis: maybe after the store added it, its reply
    lost): allowed, not required."""
    start: float = 0.0
    """When it was asked (a gift that may have been added, from then on)."""


@dataclass
class RecallTry:
    """One recall request, and what came of it."""

    start: float
    at: float
    node: int
    lane: str
    """``"room"`` or ``"personal"``."""
    seq: int
    epoch: str
    """The epoch of the message recalled (the store's when it was picked)."""
    by: str
    """``"admin"``, ``"publisher"`` or ``"uid:<sender>"``."""
    outcome: str
    """``"done"``, ``"cut"`` (its node died under it) or the error's code."""
    notice: int = 0
    into: str = ""
    """Done: the newest epoch that kept ``epoch``'s log when it was (the
    store's then: after a lossy restart, another message may hold ``seq``
    there; redis seed 117803)."""


@dataclass
class Act:
    """A moderation action answered by its node."""

    issued: float
    acked: float
    node: int
    action: str
    uid: str
    """``""`` for slow mode."""
    seconds: int
    issued_ms: int
    maybe: bool = False
    """Answered 503 (on Redis: maybe applied, its reply lost), or applied
    in a second a Redis restart lost: in force or not, any time after it
    was issued."""


@dataclass
class Send:
    """A chatter's send and its answer."""

    at: float
    ts: int
    """The message's time (ms), as the node takes it when the send arrives."""
    node: int
    uid: str
    status: int
    error: str = ""
    epoch: str = ""
    seq: int = 0


@dataclass
class NodeEnd:
    """What a running node shows once the traffic stopped."""

    node: int
    generation: int
    top: tuple[tuple[str, int], ...] | None
    """Its ranking in answers (None: none)."""
    board: Ranking
    """Its leaderboard (``GET /leaderboard?limit=100``)."""


@dataclass
class StoreEnd:
    """The store once every node stopped (and wrote its last likes)."""

    archives: list[PastBroadcast]
    likes: int
    board: Ranking
    entries: tuple[Entry, ...]
    personal: tuple[Entry, ...]


@dataclass
class FeatureRun:
    """One seed's features: what was drawn, and the ledgers."""

    drawn: Features
    until: float = 0.0
    """When the traffic stopped."""
    flush_every: float = 0.25
    """The nodes' ``likes_flush``: a tap is written at most this long after
    it was acknowledged (unless its node dies)."""
    taps: list[Tap] = field(default_factory=list)
    lost: dict[str, int] = field(default_factory=dict)
    """Taps acknowledged and not written when their node was killed, by the
    epoch they were acknowledged in."""
    kills: list[tuple[float, int, int]] = field(default_factory=list)
    """(when, node, taps lost)."""
    kill_since: dict[tuple[float, int], float] = field(default_factory=dict)
    """Per kill (when, node): when the node's last write of taps that was
    answered began (what it acknowledged before is written)."""
    gifts: list[Gift] = field(default_factory=list)
    recalls: list[RecallTry] = field(default_factory=list)
    acts: list[Act] = field(default_factory=list)
    sends: list[Send] = field(default_factory=list)
    nodes: list[NodeEnd] = field(default_factory=list)
    store: StoreEnd | None = None
    unsure: dict[str, int] = field(default_factory=dict)
    """Taps in a flush under way when their node was killed (Redis: the
    call may or may not have reached the store), by epoch: maybe lost."""
    flushed: dict[int, float] = field(default_factory=dict)
    """Per node: when the last write of its taps that was answered began
    (what it acknowledged before is written)."""
    lossy: list[tuple[float, float]] = field(default_factory=list)
    """The seconds Redis restarts lost: (from, to) of virtual time."""
    lossy_epochs: set[str] = field(default_factory=set)
    """The epochs whose numbering such a restart rewound."""
    starts: dict[int, list[float]] = field(default_factory=dict)
    """Per node: when it started, in order."""
    redis_lost: list[Loss] = field(default_factory=list)
    """What each of them took from the counters."""
    retried: list[tuple[float, float, dict[str, str], int]] = field(default_factory=list)
    """Writes of taps answered on a retry: (first tried, answered, epochs,
    taps): one a restart lost (its name with it) is added again."""
    inflight: dict[int, dict[asyncio.Future[Any], None]] = field(default_factory=dict)
    """Per node: the requests a kill cuts short (insertion-ordered: replays exactly)."""
    killing: dict[int, None] = field(default_factory=dict)
    mid_recall_kills: int = 0
    write_late: float = 0.0
    """How much later than a flush period a tap may be written: none on
    memory; on Redis any time (Redis away, a write tried again)."""
    reach: float = REACH
    """Seconds within which an action applies on every node: :data:`REACH`,
    and on Redis what its round trips may be held besides (a node reads the
    actions from the store: a refresh is two round trips, each of which
    may wait a second each way, a reply lost two seconds, and a restart
    two seconds)."""


@dataclass
class Counted:
    """The room's counters as the store holds them (read straight off the
    Redis server, an oracle: no round trip of the world's)."""

    broadcast: int
    likes: dict[int, int]
    """By broadcast: the current total, and each archive's."""
    gifts: tuple[int, int]
    """The current broadcast's gift total and count."""
    givers: dict[str, int]


@dataclass
class Loss:
    """What a Redis restart that lost its last second took from the counters."""

    at: float
    broadcast: int
    """The current broadcast, as the store numbered it then."""
    likes: dict[int, int]
    gifts: tuple[int, int]
    givers: dict[str, int]
    epoch: str = ""
    """The current epoch then (the store's numbering starts again when a
    restart lost the room whole: the checker numbers by epochs)."""


# -- the actors ---------------------------------------------------------------------------


def chatters(world: World) -> list[str]:
    """The chatters' uids (simulation.py makes them listeners)."""
    if world.features is None:
        return []
    return [f"c{i}" for i in range(world.features.drawn.chatters)]


def actors(world: World, until: float) -> list[Coroutine[Any, Any, None]]:
    """The features' traffic until ``until`` (each ends with its requests)."""
    run: FeatureRun | None = world.features
    if run is None:
        return []
    drawn = run.drawn
    run.until = until
    run.flush_every = world.settings.likes_flush
    if world.redis is not None:
        run.write_late = float("inf")
        faults = world.redis_faults
        run.reach = REACH + 2 * (float(faults.request_held > 0) + float(faults.reply_held > 0)
                                 + 2.0 * float(faults.reply_lost > 0)) \
            + 2.0 * float(faults.restarts + faults.lossy_restarts > 0)
    world.note(f"features {drawn}")
    made: list[Coroutine[Any, Any, None]] = []
    uids = chatters(world)
    for uid in uids:
        made.append(_chat(world, uid, until))
    if drawn.tap_every:
        made.append(_tapper(world, until))
    if drawn.gift_every:
        made.append(_gifter(world, until))
    if drawn.recall_every:
        made.append(_recaller(world, until))
    if drawn.act_every and uids:
        made.append(_moderator(world, uids, until))
    if drawn.kills:
        made.append(_killer(world, until))
    return made


def _pick(world: World) -> SimNode | None:
    """A running node (not being killed), drawn from the seed; None if none."""
    running = [sim for sim in world.nodes
               if sim.node is not None and sim.index not in world.features.killing]
    return world.rng.choice(running) if running else None


def _now_ms(world: World) -> int:
    return int(world.clock.time() * 1000)


def _ms(t: float) -> int:
    """The nodes' clock (Unix ms) at the loop's time ``t`` (simulation.LoopClock)."""
    return int((1_700_000_000.0 + t) * 1000)


def _current(world: World) -> str:
    """The store's current epoch, as the truth knows it."""
    return world.truth.epochs[-1]


async def _on(world: World, sim: SimNode, call: Coroutine[Any, Any, Any]) -> Any:
    """Run ``call`` as a request in flight on ``sim`` (a kill cuts it short:
    ``CancelledError``)."""
    run: FeatureRun = world.features
    task = asyncio.ensure_future(call)
    inflight = run.inflight.setdefault(sim.index, {})
    inflight[task] = None
    try:
        return await task
    finally:
        inflight.pop(task, None)


def _descendants(truth: Truth, epoch: str) -> list[str]:
    """``epoch`` and the epochs renewed from it (they kept its log)."""
    found = [epoch]
    for e in truth.epochs:
        if truth.carried.get(e) in found:
            found.append(e)
    return found


async def _chat(world: World, uid: str, until: float) -> None:
    """A chatter's sends (and recalls of some of its own)."""
    run: FeatureRun = world.features
    rng, loop, truth = world.rng, world.loop, world.truth
    later: list[asyncio.Future[None]] = []
    n = 0
    while True:
        await asyncio.sleep(rng.expovariate(1 / run.drawn.send_every))
        if loop.time() >= until:
            break
        sim = _pick(world)
        if sim is None:
            continue
        assert sim.node is not None
        n += 1
        body = f"{uid}/{n}"
        request: dict[str, Any] = {"uid": uid, "body": body}
        if world.redis is not None:
            # On Redis a send's reply may be lost after the store took it
            # (a 503): its client_msg_id says whether it did.
            request["client_msg_id"] = body
        raw = json.dumps(request).encode()
        at, ts = loop.time(), _now_ms(world)
        reply = await sim.node.proxy.sends.send(ROOM, "application/json", raw, None,
                                                "application/json", "192.0.2.7")
        doc = json.loads(reply.body)
        send = Send(at, ts, sim.index, uid, reply.status, doc.get("error", ""))
        run.sends.append(send)
        if reply.status == 503 and world.redis is not None:
            stored = _stored_send(world, body)
            if stored is None:
                continue
            send.status, send.error = 201, ""
            doc = {"epoch": stored[0], "seq": stored[1]}
            world.note(f"send {body} answered 503, stored as seq {stored[1]}")
        if send.status != 201:
            continue
        send.epoch, send.seq = doc["epoch"], doc["seq"]
        truth.epoch_seen(send.epoch)
        for epoch in _descendants(truth, send.epoch):  # renewed while it was answered
            truth.sent[epoch][send.seq] = False
            truth.stored("room", epoch, send.seq, body)
        if rng.random() < run.drawn.own_recall:
            later.append(asyncio.ensure_future(_recall(
                world, "room", send.seq, send.epoch, f"uid:{uid}", None, uid,
                delay=rng.uniform(0.05, 4.0))))
    await asyncio.gather(*later)


def _stored_send(world: World, cmid: str) -> tuple[str, int] | None:
    """Where the store took the send of ``cmid`` (its epoch and seq), read
    straight off the Redis server; None: it did not."""
    sim = world.redis
    assert sim is not None
    seq = sim.conn.get(redis_keys.client_msg_id(ROOM, cmid))
    if seq is None:
        return None
    epoch = sim.conn.hget(redis_keys.meta(ROOM), "epoch")
    if epoch is None:
        return None
    return epoch.decode(), int(seq)


async def _tapper(world: World, until: float) -> None:
    run: FeatureRun = world.features
    rng, loop = world.rng, world.loop
    while True:
        await asyncio.sleep(rng.expovariate(1 / run.drawn.tap_every))
        if loop.time() >= until:
            return
        sim = _pick(world)
        if sim is None:
            continue
        await _tap(world, sim, rng.choice(world.listeners).uid, rng.randint(1, 20))


async def _tap(world: World, sim: SimNode, uid: str, n: int) -> None:
    """One like request, as the front's route makes it."""
    run: FeatureRun = world.features
    loop = world.loop
    node = sim.node
    assert node is not None
    taps = node.proxy.taps
    # What the route reads first: the room's epoch in the node's cache (the
    # broadcast the taps belong to), None when it must read the room first.
    held = None if taps.gate is None else taps.gate.epoch(ROOM)
    start, first = loop.time(), _current(world)
    raw = json.dumps({"uid": uid, "count": n}).encode()
    answer = taps.tap(ROOM, "application/json", raw, None, "application/json")
    if not isinstance(answer, Reply):
        try:
            answer = await _on(world, sim, answer)
        except asyncio.CancelledError:  # killed: never acknowledged
            return
    if answer.status != 202:
        return
    epochs = (held,) if held is not None and held != ABSENT_EPOCH else (first, _current(world))
    run.taps.append(Tap(start, loop.time(), sim.index, uid, n, epochs,
                        stale=sim.node is not node))


async def _gifter(world: World, until: float) -> None:
    run: FeatureRun = world.features
    rng, loop = world.rng, world.loop
    publisher = f"Bearer {world.settings.publisher_token}"
    while True:
        await asyncio.sleep(rng.expovariate(1 / run.drawn.gift_every))
        if loop.time() >= until:
            return
        sim = _pick(world)
        if sim is None:
            continue
        node = sim.node
        assert node is not None
        giver = f"g{rng.randrange(GIVERS)}"
        value = rng.choice([1, 2, 5, 10, 50, 100])
        try:
            if node.proxy.taps.gate is not None:  # the gift route's row: the room must exist
                await node.proxy.taps.gate.require(ROOM)
        except LiveroomError:
            continue
        before, start = _current(world), loop.time()
        try:
            rank, _ = await node.proxy.gifts.give(
                ROOM, {"uid": giver, "value": value, "gift": "rose"}, publisher)
        except StoreUnavailable:
            # Maybe added (its reply lost), maybe not (Redis was down).
            run.gifts.append(Gift(loop.time(), sim.index, giver, value,
                                  (before, _current(world)), 0, 0, 0, maybe=True,
                                  start=start))
            continue
        except LiveroomError:
            continue
        run.gifts.append(Gift(loop.time(), sim.index, giver, value, (before, _current(world)),
                              rank.rank, rank.score, rank.total))


async def _recaller(world: World, until: float) -> None:
    """The moderators' and the backend's recalls of recent messages."""
    run: FeatureRun = world.features
    rng, loop, truth = world.rng, world.loop, world.truth
    tokens = {"admin": world.settings.admin_token, "publisher": world.settings.publisher_token}
    later: list[asyncio.Future[None]] = []
    while True:
        await asyncio.sleep(rng.expovariate(1 / run.drawn.recall_every))
        if loop.time() >= until:
            break
        epoch = _current(world)
        sent, personal = truth.sent.get(epoch), truth.personal.get(epoch)
        if personal and rng.random() < 0.3:
            lane, seq = "personal", rng.choice(sorted(personal)[-RECENT_RECALLED:])
        elif sent:
            lane, seq = "room", rng.choice(sorted(sent)[-RECENT_RECALLED:])
        else:
            continue
        by = rng.choice(["admin", "publisher"])
        later.append(asyncio.ensure_future(_recall(world, lane, seq, epoch, by,
                                                   f"Bearer {tokens[by]}", None)))
    await asyncio.gather(*later)


async def _recall(world: World, lane: str, seq: int, epoch: str, by: str,
                  authorization: str | None, uid: str | None, *, delay: float = 0.0) -> None:
    """A recall, tried again while it is cut short or answered 503 (or given
    up, as a moderator may)."""
    run: FeatureRun = world.features
    rng, loop = world.rng, world.loop
    await asyncio.sleep(delay)
    for _ in range(4):
        sim = _pick(world)
        if sim is None:
            await asyncio.sleep(0.3)
            continue
        node = sim.node
        assert node is not None
        killing = None
        if run.mid_recall_kills < 3 and rng.random() < run.drawn.kill_mid_recall:
            # The node dies while the recall runs through it (somewhere in
            # its round trips: a write may take up to write_delay each way).
            run.mid_recall_kills += 1
            killing = asyncio.ensure_future(_kill_after(
                world, sim, rng.uniform(0.0, 2 * world.faults.write_delay)))
        start = loop.time()
        notice = 0
        into = ""
        try:
            doc = await _on(world, sim, _recall_call(node, lane, seq, authorization, uid))
            outcome, notice = "done", doc["notice"]
            # The notice takes a seq of its lane's numbering: one a Redis
            # restart may lose, and a later message take again.
            kind = "room" if lane == "room" else "personal"
            truth = world.truth
            descendants = _descendants(truth, epoch)
            into = descendants[-1]
            for e in descendants:
                held = truth.bodies.get((kind, e), {})
                # (unless a retry's: the same notice, already there)
                if notice not in held or (kind, e, notice, held[notice]) in truth.lost:
                    truth.stored(kind, e, notice, ("notice", seq))
        except asyncio.CancelledError:
            outcome = "cut"
        except LiveroomError as exc:
            outcome = exc.code
        run.recalls.append(RecallTry(start, loop.time(), sim.index, lane, seq, epoch, by,
                                     outcome, notice, into))
        world.note(f"recall {lane} {seq} by {by} through node {sim.index}: {outcome}"
                   + (f", notice {notice}" if notice else ""))
        if killing is not None:
            await killing  # the node is back before the traffic may end
        if outcome not in ("cut", "store_unavailable") or rng.random() >= run.drawn.retry_recall:
            return
        await asyncio.sleep(rng.uniform(0.1, 1.0))


async def _recall_call(node: Any, lane: str, seq: int, authorization: str | None,
                       uid: str | None) -> dict[str, Any]:
    """The recall routes' work: the room must exist, then ``Recalls.recall``."""
    gate = node.proxy.taps.gate
    if gate is not None:
        await gate.require(ROOM)
    doc: dict[str, Any] = await node.proxy.recalls.recall(
        ROOM, str(seq), authorization, uid, personal=lane == "personal")
    return doc


async def _moderator(world: World, uids: list[str], until: float) -> None:
    """Mutes, bans (timed: they end before the quiet) and slow mode, through
    any running node."""
    run: FeatureRun = world.features
    rng, loop = world.rng, world.loop
    while True:
        await asyncio.sleep(rng.expovariate(1 / run.drawn.act_every))
        if loop.time() >= until:
            return
        sim = _pick(world)
        if sim is None:
            continue
        assert sim.node is not None
        action = rng.choice(["mute", "mute", "unmute", "ban", "ban", "unban", "slow"])
        uid = "" if action == "slow" else rng.choice(uids)
        seconds = {"mute": rng.randint(1, 8), "ban": rng.randint(1, 6),
                   "slow": rng.choice([0, 2, 3, 5])}.get(action, 0)
        issued, issued_ms = loop.time(), _now_ms(world)
        maybe = False
        try:
            await sim.node.proxy.moderation.act(ROOM, AuditEntry(
                at_ms=issued_ms, by="admin", action=action, target=uid, seconds=seconds,
                reason=""))
        except StoreUnavailable:
            maybe = True  # Redis down (not applied) or its reply lost (applied)
        run.acts.append(Act(issued, loop.time(), sim.index, action, uid, seconds, issued_ms,
                            maybe=maybe))
        world.note(f"{action} {uid or '-'} {seconds} s through node {sim.index}"
                   + (": 503, maybe applied" if maybe else ""))


async def _killer(world: World, until: float) -> None:
    rng, loop = world.rng, world.loop
    for at in sorted(rng.uniform(1.0, until) for _ in range(world.features.drawn.kills)):
        await asyncio.sleep(max(0.0, at - loop.time()))
        sim = _pick(world)
        if sim is not None:
            await kill(world, sim, sim.generation)


async def _kill_after(world: World, sim: SimNode, delay: float) -> None:
    generation = sim.generation
    await asyncio.sleep(delay)
    await kill(world, sim, generation)


async def kill(world: World, sim: SimNode, generation: int) -> None:
    """The node dies: the taps it acknowledged and has not written are lost
    (counted in the ledger by their epoch), its requests in flight are cut
    short; then it starts again, its caches empty, like a restart."""
    run: FeatureRun = world.features
    node = sim.node
    if node is None or sim.generation != generation or sim.index in run.killing:
        return
    run.killing[sim.index] = None
    try:
        likes = node.proxy.likes
        # A flush under way (Redis: it waits) may or may not reach the
        # store; a dead node writes nothing more (not what a failed write
        # puts back, nor what is left at its stop).
        for room, n in likes._writing.items():
            epoch = likes._writing_epoch.get(room, "")
            run.unsure[epoch] = run.unsure.get(epoch, 0) + n
        for write in likes._retries:  # failed: maybe added, the reply lost
            for room, n in write.taps.items():
                epoch = write.epochs.get(room, "")
                run.unsure[epoch] = run.unsure.get(epoch, 0) + n
        likes._retries.clear()
        likes._store = _Dead(likes._store)  # type: ignore[assignment]
        lost = 0
        for room, n in likes._pending.items():
            epoch = likes._pending_epoch.get(room, "")
            run.lost[epoch] = run.lost.get(epoch, 0) + n
            lost += n
        for (_, epoch), n in likes._older.items():
            run.lost[epoch] = run.lost.get(epoch, 0) + n
            lost += n
        likes._pending.clear()
        likes._pending_epoch.clear()
        likes._older.clear()
        run.kills.append((world.loop.time(), sim.index, lost))
        run.kill_since[world.loop.time(), sim.index] = run.flushed.get(sim.index, 0.0)
        for task in list(run.inflight.get(sim.index, {})):
            task.cancel()
        world.note(f"kill node {sim.index} ({lost} taps not written lost)")
        await sim.stop()
        await asyncio.sleep(world.rng.uniform(0.0, 1.0))
        await sim.start()
    finally:
        del run.killing[sim.index]


def stopped(world: World, node: Any) -> None:
    """A node stopped cleanly: the taps its last flush could not write (the
    store away: "written when it is back", but the node is gone) are lost,
    and those of writes that failed maybe written."""
    run: FeatureRun | None = world.features
    if run is None:
        return
    likes = node.proxy.likes
    left = 0
    for room, n in likes._pending.items():
        epoch = likes._pending_epoch.get(room, "")
        run.lost[epoch] = run.lost.get(epoch, 0) + n
        left += n
    for (_, epoch), n in likes._older.items():
        run.lost[epoch] = run.lost.get(epoch, 0) + n
        left += n
    for write in likes._retries:
        for room, n in write.taps.items():
            epoch = write.epochs.get(room, "")
            run.unsure[epoch] = run.unsure.get(epoch, 0) + n
            left += n
    if left:
        world.note(f"a node stopped with {left} taps not written (the store away)")


def _numbering_unsure(world: World, run: FeatureRun) -> None:
    """A recall or a send that a Redis restart's lost second may have taken
    (stored then, answered after, or answered 503): its seq was maybe lost
    and taken again, which the truth cannot say. Its epoch's counts are not
    checked (as for a lost message whose seq was taken: ``Truth.reused``)."""
    truth = world.truth
    unsure: set[str] = set()
    for since, to in run.lossy:
        # A reply may come up to two seconds after Redis ran its call.
        for attempt in run.recalls:
            if attempt.start <= to and attempt.at >= since:
                unsure.add(attempt.epoch)
                if attempt.notice:  # maybe lost with the second
                    kind = "room" if attempt.lane == "room" else "personal"
                    for e in _descendants(truth, attempt.epoch):
                        truth.lost.add((kind, e, attempt.notice, ("notice", attempt.seq)))
            elif attempt.outcome != "done" and set(
                    _descendants(truth, attempt.epoch)) & run.lossy_epochs:
                # A notice the truth does not know of (maybe stored, its
                # reply lost or its node killed), in a numbering a restart
                # rewound: the seqs it and the lost ones took are not known.
                unsure.add(attempt.epoch)
        for send in run.sends:
            if since - 2.0 <= send.at <= to:
                # (answered 503 and not found: maybe stored and lost)
                unsure.update([send.epoch] if send.epoch else truth.epochs)
    for epoch in unsure:
        for e in _descendants(truth, epoch):
            truth.lost.add(("room", e, -1, ("maybe taken again",)))


class _Dead:
    """A killed node's counters: it writes no more taps."""

    def __init__(self, counters: Any) -> None:
        self._counters = counters

    async def add_likes(self, *args: Any, **kwargs: Any) -> None:
        raise StoreUnavailable("the node was killed")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._counters, name)


class FlushedCounters:
    """A node's counters, noting when each write of its taps that was
    answered began (:attr:`FeatureRun.flushed`)."""

    def __init__(self, world: World, index: int, counters: Any) -> None:
        self._world = world
        self._index = index
        self._counters = counters
        self._names: dict[str, float] = {}
        """Each write's name: when it was first tried."""

    async def add_likes(self, taps: Any, now_ms: int, epochs: Any = None,
                        write_id: str = "") -> None:
        start = self._world.loop.time()
        first = self._names.setdefault(write_id, start)
        kwargs = {"write_id": write_id} if write_id else {}
        await self._counters.add_likes(taps, now_ms, epochs, **kwargs)
        run: FeatureRun | None = self._world.features
        if run is None:
            return
        if first == start:  # a retry holds taps of before the last write
            run.flushed[self._index] = max(run.flushed.get(self._index, 0.0), start)
        else:
            for room, n in taps.items():
                run.retried.append((first, self._world.loop.time(),
                                    {room: (epochs or {}).get(room, "")}, n))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._counters, name)


def counted(world: World) -> Counted:
    """The room's counters now, read straight off the Redis server."""
    sim = world.redis
    assert sim is not None
    conn = sim.conn
    n = int(conn.hget(redis_keys.broadcasts(ROOM), "n") or 1)
    likes = {n: int(conn.get(redis_keys.likes(ROOM)) or 0)}
    for b in range(1, n):
        likes[b] = int(conn.hget(redis_keys.viewers_meta(ROOM, b), "likes") or 0)
    gifts = conn.hmget(redis_keys.gifts(ROOM), ["t", "c"])
    givers = {k.decode(): int(v) for k, v in
              conn.zrange(redis_keys.givers(ROOM), 0, -1, withscores=True)}
    return Counted(n, likes, (int(gifts[0] or 0), int(gifts[1] or 0)), givers)


def lost_second(world: World, before: Counted, since: float) -> None:
    """A Redis restart put the data set back as it was at ``since``: note
    what it lost of the counters (``before``: as they were just before)."""
    run: FeatureRun | None = world.features
    if run is None:
        return
    after = counted(world)
    at = world.loop.time()
    run.lossy.append((since, at))
    run.lossy_epochs.add(_current(world))
    likes = {b: n - after.likes.get(b, 0) for b, n in before.likes.items()
             if n != after.likes.get(b, 0)}
    givers = {g: s - after.givers.get(g, 0) for g, s in before.givers.items()
              if s != after.givers.get(g, 0)}
    gifts = (before.gifts[0] - after.gifts[0], before.gifts[1] - after.gifts[1])
    run.redis_lost.append(Loss(at, before.broadcast, likes, gifts, givers, _current(world)))
    if likes or gifts != (0, 0):
        world.note(f"the restart lost likes {likes}, gifts {gifts[0]} in {gifts[1]}")


# -- what the nodes and the store show at the end -----------------------------------------


async def observe_nodes(world: World) -> None:
    """Once the traffic stopped and the listeners caught up: each running
    node's ranking in answers and its leaderboard."""
    run: FeatureRun | None = world.features
    if run is None:
        return
    for sim in world.nodes:
        node = sim.node
        if node is None:
            continue
        encoded = node.proxy.ranking.encoded.get(ROOM)
        board = await node.proxy.gifts.ranking(ROOM, 100)
        run.nodes.append(NodeEnd(sim.index, sim.generation,
                                 None if encoded is None else encoded.top, board))


async def observe_store(world: World) -> None:
    """Once every node stopped (a clean stop writes its last likes): the
    archives, the current broadcast's counters and the room's log."""
    run: FeatureRun | None = world.features
    if run is None:
        return
    _numbering_unsure(world, run)
    store = world.store
    pulled = (await store.log.pull([PullRequest(ROOM, 0, 100_000)]))[0]
    run.store = StoreEnd(await store.operators.broadcasts(ROOM),
                         (await store.counters.likes([ROOM]))[ROOM],
                         await store.counters.ranking(ROOM, 100),
                         pulled.entries, pulled.personal)


# -- the checks -------------------------------------------------------------------------


class Broadcasts:
    """Which broadcast each epoch is of: a renewed epoch is its log's, any
    other begins one; numbered as the store numbers them (1 for a room never
    ended), the last being the current one."""

    def __init__(self, truth: Truth, current: int | None, events: list[str] = ()) -> None:  # type: ignore[assignment]
        roots: list[str] = []
        self.of_epoch: dict[str, int] = {}
        self.last_epoch: dict[int, str] = {}
        root_of: dict[str, str] = {}
        for epoch in truth.epochs:
            if epoch == ABSENT_EPOCH:
                continue
            root_of[epoch] = root = truth.root(epoch)
            if root not in roots:
                roots.append(root)
        self.current = len(roots) if current is None else current
        first = self.current - len(roots) + 1
        for epoch, root in root_of.items():
            self.of_epoch[epoch] = b = first + roots.index(root)
            self.last_epoch[b] = epoch
        self.gone = set(truth.gone)
        """Epochs a Redis restart lost with the room's whole log."""
        self.ends: list[float] = []
        """When the broadcasts ended, in order (from the world's events)."""
        for event in events:
            at, _, what = event.strip().partition(" ")
            if what.startswith("end broadcast -> "):
                self.ends.append(float(at))

    def shift(self, loss: Loss) -> int:
        """What to add to the store's broadcast numbers of ``loss`` for ours."""
        ours = self.of(loss.epoch) if loss.epoch else None
        return 0 if ours is None else ours - loss.broadcast

    def at(self, b: int, t: float) -> int:
        """The current broadcast at ``t``, at least ``b`` (the last one when
        the ends' times are not known)."""
        if not self.ends:
            return self.current
        return max(b, self.current - sum(1 for end in self.ends if end > t))

    def of(self, epoch: str) -> int | None:
        return self.of_epoch.get(epoch)


def check(world: World) -> list[str]:
    """Every broken promise of the features, one line each."""
    run: FeatureRun | None = world.features
    if run is None:
        return []
    store = run.store
    current = None
    if store is not None:
        current = max((a.broadcast for a in store.archives), default=0) + 1
    broadcasts = Broadcasts(world.truth, current, world.events)
    listeners = list(world.listeners)
    return (check_likes(run, broadcasts, listeners)
            + check_gifts(run, broadcasts, listeners)
            + check_recalls(run, broadcasts, listeners, world.truth)
            + check_moderation(run, listeners))


# likes ---------------------------------------------------------------------------------


PULL_HELD_MAX: Final = 2.5
"""Seconds a node's read of a room may lag the store's (a request and its
reply held, each up to a second in :mod:`sim_redis`), with room to spare."""


def _tap_broadcasts(tap: Tap, bc: Broadcasts, flush_every: float) -> tuple[int, ...]:
    """The broadcasts a tap may count in."""
    if bc.gone.intersection(tap.epochs):
        # Its room lost whole by a restart: written to whatever broadcast
        # is current then (the store knows not its epoch).
        first = min((b for b in map(bc.of, tap.epochs) if b is not None), default=None)
        return () if first is None else tuple(range(first, bc.current + 1))
    if len(tap.epochs) == 1:
        b = bc.of(tap.epochs[0])
        if b is None:
            return ()
        if bc.last_epoch.get(b) != tap.epochs[0]:
            # Its epoch was renewed: an end after it does not know the epoch,
            # and taps written after that end go to the then current broadcast
            # (Counters.add_likes); they are written within a flush.
            return tuple(range(b, bc.at(b, tap.at + flush_every + 0.01) + 1))
        return (b,)
    last = bc.of(tap.epochs[-1])
    first = bc.of(tap.epochs[0]) or last
    if tap.epochs[0] == ABSENT_EPOCH and bc.of_epoch:
        # Begun before the room was made: the room the node read may be of
        # any broadcast since (redis seed 95556: made, then ended, while the
        # request was held).
        first = min(bc.of_epoch.values())
    elif first is not None:
        # The node read the room first: with a pull another poll began, whose
        # reply Redis may have held (up to a second) past an end; the room
        # it read may be the broadcast before (redis seed 105289).
        first = min(first, bc.at(1, tap.start - PULL_HELD_MAX))
    if first is None or last is None:
        return ()
    return tuple(range(first, last + 1))


def check_likes(run: FeatureRun, bc: Broadcasts, listeners: list[SimListener]) -> list[str]:
    problems: list[str] = []
    sure: dict[int, int] = {}
    maybe: dict[int, int] = {}
    stale = 0
    # Per broadcast, the taps that may count in it by the time they were
    # acknowledged (an answer's bound).
    upto: dict[int, tuple[list[float], list[int]]] = {}
    for tap in sorted(run.taps, key=lambda t: t.at):
        counted = _tap_broadcasts(tap, bc, run.flush_every + run.write_late)
        if not counted:
            problems.append(f"likes: {tap.n} taps of {tap.uid} acknowledged at {tap.at:.3f} "
                            f"(node {tap.node}) in unknown epochs {tap.epochs}")
            continue
        stale += tap.n if tap.stale else 0
        for b in counted:
            if len(counted) == 1 and not tap.stale:
                sure[b] = sure.get(b, 0) + tap.n
            else:
                maybe[b] = maybe.get(b, 0) + tap.n
            times, sums = upto.setdefault(b, ([], []))
            times.append(tap.at)
            sums.append((sums[-1] if sums else 0) + tap.n)
    lost: dict[int, int] = {}
    for epoch, n in (*run.lost.items(), *run.unsure.items()):
        of = bc.of(epoch)
        if of is not None:
            lost[of] = lost.get(of, 0) + n
    # What Redis restarts that lost their last second took: exactly that.
    redis_lost: dict[int, int] = {}
    for loss in run.redis_lost:
        shift = bc.shift(loss)
        for b, n in loss.likes.items():
            redis_lost[b + shift] = redis_lost.get(b + shift, 0) + n
    # A write a restart lost, its name with it, answered on a retry after
    # the restart: added again (maybe).
    back: dict[int, int] = {}
    for first, answered, epochs, n in run.retried:
        if any(first <= to <= answered for _, to in run.lossy):
            for epoch in epochs.values():
                of = bc.of(epoch) if epoch else bc.current
                if of is not None:
                    back[of] = back.get(of, 0) + n
    store = run.store
    if store is not None:
        # "A tap belongs to the broadcast in which it was acknowledged [...]
        # on every node"; "a crash loses the taps acknowledged since the
        # last write"; a clean stop writes what is left.
        shown = {a.broadcast: a.likes for a in store.archives}
        shown[bc.current] = store.likes
        for b in sorted(shown):
            low = sure.get(b, 0) - lost.get(b, 0) - redis_lost.get(b, 0)
            high = sure.get(b, 0) + maybe.get(b, 0) - redis_lost.get(b, 0) + back.get(b, 0)
            if not low <= shown[b] <= high:
                where = "the current broadcast" if b == bc.current else f"ended broadcast {b}"
                problems.append(
                    f"likes: {where} holds {shown[b]}, but {sure.get(b, 0)} taps were "
                    f"acknowledged in it ({maybe.get(b, 0)} more maybe), {lost.get(b, 0)} "
                    f"lost with a killed node" + (f", {redis_lost[b]} by a Redis restart"
                                                  if redis_lost.get(b) else ""))
        acked = sum(tap.n for tap in run.taps)
        total, gone = sum(shown.values()), sum(run.lost.values())
        unsure, by_redis = sum(run.unsure.values()), sum(redis_lost.values())
        again = sum(back.values())
        if not (acked - gone - unsure - stale - by_redis <= total
                <= acked - gone - by_redis + again):
            problems.append(f"likes: the broadcasts hold {total} in all, {acked} taps were "
                            f"acknowledged, {gone} lost with killed nodes"
                            + (f" ({unsure} maybe)" if unsure else "")
                            + (f", {by_redis} by Redis restarts" if by_redis else ""))
    # "A crash loses the taps acknowledged since the last write (at most
    # --likes-flush of them)": since the last write that was answered began
    # (while the store is away, taps wait in memory).
    for at, node, gone in run.kills:
        since = run.kill_since.get((at, node))
        if since is None:
            recent = sum(tap.n for tap in run.taps
                         if tap.node == node and at - run.flush_every - 0.01 < tap.at <= at)
            within = f"in the last {run.flush_every:g} s"
        else:
            recent = sum(tap.n for tap in run.taps if tap.node == node and since <= tap.at <= at)
            within = f"since its last write began at {since:.3f}"
        if gone > recent:
            problems.append(f"likes: node {node} killed at {at:.3f} lost {gone} taps, it "
                            f"acknowledged {recent} {within}")
    # Answers: "It never goes down within a broadcast" (an answer shows its
    # node's total: per node, between its restarts) and counts the taps
    # acknowledged in it (store's and the node's own).
    for listener in listeners:
        last: dict[tuple[int, int, int], tuple[int, float]] = {}
        for a in listener.answers:
            likes = a.body.get("likes")
            of = bc.of(a.body["epoch"])
            if likes is None or of is None:
                continue
            b = of
            key = (a.node, a.generation, b)
            before = last.get(key)
            if before is not None and likes < before[0]:
                problems.append(f"{listener.uid}: answer at {a.at:.3f} (node {a.node}) in "
                                f"epoch {a.body['epoch']} (broadcast {b}): likes {likes}, "
                                f"down from {before[0]} at {before[1]:.3f}")
            last[key] = (likes, a.at)
            times, sums = upto.get(b, ([], []))
            i = bisect.bisect_right(times, a.at)
            bound = sums[i - 1] if i else 0
            if likes > bound:
                problems.append(f"{listener.uid}: answer at {a.at:.3f} (node {a.node}) in "
                                f"epoch {a.body['epoch']} (broadcast {b}): likes {likes}, "
                                f"only {bound} taps acknowledged in it so far")
    return problems


# gifts ---------------------------------------------------------------------------------


def _ranked(scores: dict[str, int]) -> tuple[tuple[str, int], ...]:
    """Score descending, equal scores by uid descending (Redis's order)."""
    return tuple(sorted(scores.items(), key=lambda kv: (kv[1], kv[0]), reverse=True))


def check_gifts(run: FeatureRun, bc: Broadcasts, listeners: list[SimListener]) -> list[str]:
    problems: list[str] = []
    scores: dict[int, dict[str, int]] = {}
    totals: dict[int, int] = {}
    counts: dict[int, int] = {}
    unsure: set[int] = set()
    # Gifts answered 503 (maybe added) and what Redis restarts lost: from
    # when one may count, the answers of its broadcast are not exact; the
    # end state is the ledger less what the restarts lost, within what the
    # maybe gifts add.
    loose: dict[int, float] = {}
    extra: dict[int, dict[str, int]] = {}
    extra_total: dict[int, tuple[int, int]] = {}
    for gift in run.gifts:
        if not gift.maybe:
            continue
        first, last = bc.of(gift.epochs[0]), bc.of(gift.epochs[1])
        for b in {first, last} - {None}:
            assert b is not None
            loose[b] = min(loose.get(b, gift.start), gift.start)
            givers = extra.setdefault(b, {})
            givers[gift.giver] = givers.get(gift.giver, 0) + gift.value
            t, c = extra_total.get(b, (0, 0))
            extra_total[b] = (t + gift.value, c + 1)
    since = dict(run.lossy)
    for loss in run.redis_lost:
        if loss.gifts != (0, 0):
            b = loss.broadcast + bc.shift(loss)
            loose[b] = min(loose.get(b, loss.at), since.get(loss.at, loss.at), loss.at)
    lost: dict[int, dict[str, int]] = {}
    lost_total: dict[int, tuple[int, int]] = {}
    for loss in run.redis_lost:
        b = loss.broadcast + bc.shift(loss)
        givers = lost.setdefault(b, {})
        for g, n in loss.givers.items():
            givers[g] = givers.get(g, 0) + n
        t, c = lost_total.get(b, (0, 0))
        lost_total[b] = (t + loss.gifts[0], c + loss.gifts[1])
    for gift in run.gifts:  # in the order the store added them
        if gift.maybe:
            continue
        first, last = bc.of(gift.epochs[0]), bc.of(gift.epochs[1])
        if first != last or last is None or bc.gone.intersection(gift.epochs):
            unsure.update(b for b in (first, last) if b is not None)
            if bc.gone.intersection(gift.epochs) and last is not None:
                # Its room lost whole by a restart: the store's broadcast goes
                # on in the log made next (a new epoch, counted here as a new
                # broadcast), its gifts with it.
                unsure.add(last + 1)
            continue
        b = last
        givers = scores.setdefault(b, {})
        givers[gift.giver] = score = givers.get(gift.giver, 0) + gift.value
        totals[b] = total = totals.get(b, 0) + gift.value
        counts[b] = counts.get(b, 0) + 1
        if b in unsure or gift.at >= loose.get(b, float("inf")):
            continue
        # "the answer is the giver's rank, score and the total"
        rank = 1 + sum(1 for g, s in givers.items() if (s, g) > (score, gift.giver))
        if (gift.rank, gift.score, gift.total) != (rank, score, total):
            problems.append(f"gifts: {gift.value} from {gift.giver} at {gift.at:.3f} (node "
                            f"{gift.node}) answered rank {gift.rank}, score {gift.score}, "
                            f"total {gift.total}; the ledger says {rank}, {score}, {total}")
    for b, givers in lost.items():  # what the restarts took, exactly
        kept = scores.setdefault(b, {})
        for g, n in givers.items():
            kept[g] = kept.get(g, 0) - n
            if not kept[g]:
                del kept[g]
        totals[b] = totals.get(b, 0) - lost_total[b][0]
        counts[b] = counts.get(b, 0) - lost_total[b][1]
    current = bc.current
    if current not in unsure and current in extra and run.store is not None:
        # Maybe gifts: the store holds the ledger's and some of them; every
        # node converges to the store's.
        board = run.store.board
        problems += _within("the store's current", board.top, board.total, board.count,
                            scores.get(current, {}), totals.get(current, 0),
                            counts.get(current, 0), extra[current], extra_total[current])
        for view in run.nodes:
            if view.board != board:
                problems.append(f"gifts: node {view.node}'s leaderboard {view.board.top[:5]} "
                                f"total {view.board.total}, the store's {board.top[:5]} "
                                f"{board.total}")
        unsure.add(current)
    if current not in unsure:
        top = _ranked(scores.get(current, {}))
        # "/leaderboard lists the top limit givers [...] the gift total and
        # how many gifts were given, for the current broadcast"
        for view in run.nodes:
            board = view.board
            if (board.top, board.total, board.count) != (top[:100], totals.get(current, 0),
                                                         counts.get(current, 0)):
                problems.append(f"gifts: node {view.node}'s leaderboard {board.top[:5]} total "
                                f"{board.total} count {board.count}; the ledger's "
                                f"{top[:5]} {totals.get(current, 0)} "
                                f"{counts.get(current, 0)}")
        # "Poll answers carry the top three givers as ranking": every node
        # that serves the room, once it read the ranking after the traffic.
        serving = {(a.node, a.generation) for listener in listeners for a in listener.answers
                   if a.at > run.until + 5}
        for view in run.nodes:
            if (view.node, view.generation) in serving and view.top != (top[:3] or None):
                problems.append(f"gifts: node {view.node}'s ranking in answers is {view.top}, "
                                f"the ledger's top {top[:3]}")
        for listener in listeners:
            if not listener.answers or listener.answers[-1].at < run.until + 3:
                continue
            ranking = listener.answers[-1].body.get("ranking")
            got = () if ranking is None else tuple((e["uid"], e["score"])
                                                   for e in ranking["top"])
            if got != top[:3]:
                problems.append(f"{listener.uid}: last answer's ranking {got}, the ledger's top "
                                f"{top[:3]}")
    elif current in extra and run.store is not None:
        # The ranking in answers: the store's top three, on every node.
        top = run.store.board.top
        serving = {(a.node, a.generation) for listener in listeners for a in listener.answers
                   if a.at > run.until + 5}
        for view in run.nodes:
            if (view.node, view.generation) in serving and view.top != (top[:3] or None):
                problems.append(f"gifts: node {view.node}'s ranking in answers is {view.top}, "
                                f"the store's top {top[:3]}")
    if run.store is not None:
        # "room end freezes the ranking (its top 100) and the total into the
        # broadcast's archive"
        for past in run.store.archives:
            b = past.broadcast
            if b in unsure:
                continue
            if b in extra:
                t, c = extra_total[b]
                if not totals.get(b, 0) <= past.gifts <= totals.get(b, 0) + t:
                    problems.append(f"gifts: ended broadcast {b} archived total {past.gifts}; "
                                    f"the ledger's {totals.get(b, 0)} and {t} maybe")
                continue
            kept = _ranked(scores.get(b, {}))[:RANKING_KEPT]
            if (past.gifts, past.ranking) != (totals.get(b, 0), kept):
                problems.append(f"gifts: ended broadcast {b} archived total {past.gifts}, "
                                f"ranking {past.ranking[:5]}; the ledger's "
                                f"{totals.get(b, 0)}, {kept[:5]}")
        board = run.store.board
        if current not in unsure and (board.total, board.count) != (
                totals.get(current, 0), counts.get(current, 0)):
            problems.append(f"gifts: the store's current total {board.total} in "
                            f"{board.count} gifts; the ledger's {totals.get(current, 0)} in "
                            f"{counts.get(current, 0)}")
    return problems


def _within(what: str, top: tuple[tuple[str, int], ...], total: int, count: int,
            scores: dict[str, int], sure_total: int, sure_count: int, extra: dict[str, int],
            extra_total: tuple[int, int]) -> list[str]:
    """Whether a ranking holds the ledger's gifts and some of the maybe ones."""
    problems: list[str] = []
    if not (sure_total <= total <= sure_total + extra_total[0]
            and sure_count <= count <= sure_count + extra_total[1]):
        problems.append(f"gifts: {what} total {total} in {count} gifts; the ledger's "
                        f"{sure_total} in {sure_count}, and {extra_total[0]} in "
                        f"{extra_total[1]} maybe")
    held = dict(top)
    if len(top) < 100:
        for giver in {**scores, **held}:
            low = scores.get(giver, 0)
            if not low <= held.get(giver, 0) <= low + extra.get(giver, 0):
                problems.append(f"gifts: {what} ranking gives {giver} {held.get(giver, 0)}; "
                                f"the ledger {low}, and {extra.get(giver, 0)} maybe")
    if list(top) != sorted(top, key=lambda kv: (kv[1], kv[0]), reverse=True):
        problems.append(f"gifts: {what} ranking {top[:5]} is out of order")
    return problems


# recalls ---------------------------------------------------------------------------------


@dataclass
class _Target:
    """A message whose recall was asked: every try, and its notice."""

    lane: str
    seq: int
    broadcast: int
    to: str | None = None
    notices: dict[int, None] = field(default_factory=dict)
    done: bool = False
    """Acknowledged, or its tombstone found in the store."""
    asked: float = 0.0
    """When the first recall that was done (else the first one) was asked
    (0: not known, a tombstone found): an answer before knows nothing of
    its notice (after a Redis restart lost a notice, a later one may take
    its seq, and a node may still serve the lost one while Redis is down)."""

    @property
    def notice(self) -> int:
        return next(iter(self.notices), 0)


def check_recalls(run: FeatureRun, bc: Broadcasts, listeners: list[SimListener],
                  truth: Truth) -> list[str]:
    problems: list[str] = []
    targets: dict[tuple[int, str, int], _Target] = {}
    skipped: set[tuple[int, str, int]] = set()
    for attempt in run.recalls:
        b = bc.of(attempt.epoch)
        if b is None:
            continue
        key = (b, attempt.lane, attempt.seq)
        if any(attempt.start <= to and attempt.at >= since for since, to in run.lossy):
            # Its tombstone and notice maybe in a second a Redis restart
            # lost, and its seq taken again: the message is not checked.
            skipped.add(key)
        target = targets.get(key)
        if target is None:
            to = truth.personal.get(attempt.epoch, {}).get(attempt.seq) \
                if attempt.lane == "personal" else None
            target = targets[key] = _Target(attempt.lane, attempt.seq, b, to,
                                            asked=attempt.start)
        if attempt.outcome == "done":
            target.asked = attempt.start if not target.done else min(target.asked,
                                                                     attempt.start)
            if attempt.lane == "personal" and not target.done:
                # The addressee of the message the recall took: an earlier try
                # may have named a position a restart lost, which another
                # addressee's message took since (redis seed 80919), in the
                # epoch the store had by then (redis seed 117803).
                target.to = truth.personal.get(attempt.into or attempt.epoch, {}).get(
                    attempt.seq)
            target.done = True
            target.notices[attempt.notice] = None
    for key in skipped:
        targets.pop(key, None)
    lost_seqs = {(e, seq) for _, e, seq, _ in truth.lost}
    # Epochs whose numbering a lossy restart rewound under writes the truth
    # does not know of (``_numbering_unsure``): past the heads it kept, a
    # position may have been taken twice.
    retaken = {e: truth.rewound.get(e, (0, 0)) for _, e, seq, _ in truth.lost if seq == -1}
    for target in targets.values():
        # "recalling twice answers the same (the same notice, and no second
        # one is sent)"; "a 503 or a lost answer is retried as it was"
        if len(target.notices) > 1:
            problems.append(f"recall: {target.lane} message {target.seq} (broadcast "
                            f"{target.broadcast}) answered notices {list(target.notices)}")
    store = run.store
    if store is not None:
        # "The tombstone and the notice are one step in the store: a recall
        # cut short (the client resets, the node dies) is done with its
        # notice or not done."
        for lane, kept in (("room", store.entries), ("personal", store.personal)):
            notices = {recalled_target(e): e.seq for e in kept if e.uid == RECALL_UID}
            for e in kept:
                if e.uid == RECALL_UID:
                    continue
                key = (bc.current, lane, e.seq)
                if key in skipped:
                    continue
                target = targets.get(key)
                if e.body is None:
                    if target is None:
                        target = targets[key] = _Target(lane, e.seq, bc.current, e.to)
                    elif not target.done:
                        # The recall that took it was cut: its tries may have
                        # named the position while a message a restart lost
                        # held it, for another addressee than the one the
                        # tombstone's message had (redis seed 90768).
                        target.to = e.to
                    target.done = True
                    if e.seq in notices:
                        target.notices.setdefault(notices[e.seq], None)
                    else:
                        problems.append(f"recall: the store holds the tombstone of {lane} "
                                        f"message {e.seq} and no notice of its recall")
                elif target is not None and target.done:
                    problems.append(f"recall: {lane} message {e.seq}'s recall was answered, "
                                    f"the store still holds its body")
    by_broadcast: dict[int, list[_Target]] = {}
    for target in targets.values():
        by_broadcast.setdefault(target.broadcast, []).append(target)
    for listener in listeners:
        problems += [f"{listener.uid}: {p}"
                     for p in _check_told(listener, bc, targets, by_broadcast, skipped,
                                          lost_seqs, retaken)]
    return problems


def _check_told(listener: SimListener, bc: Broadcasts,
                targets: dict[tuple[int, str, int], _Target],
                by_broadcast: dict[int, list[_Target]],
                skipped: set[tuple[int, str, int]] = frozenset(),  # type: ignore[assignment]
                lost_seqs: set[tuple[str, int]] = frozenset(),  # type: ignore[assignment]
                retaken: dict[str, tuple[int, int]] | None = None) -> list[str]:
    """``lost_seqs``: (epoch, seq) a Redis restart lost (and a later
    message may have taken): a notice there may be the lost one's.
    ``retaken``: per epoch whose numbering a lossy restart rewound under
    writes the truth does not know of, the room and personal heads it kept.
    A notice past them may sit where such a lost write sat: a node that held
    the lost one answers over the notice until its next pull finds the log
    rewritten (its anchor) and resets the room, so there the rule is that
    a later answer resets the listener (redis-sharded seed 91829)."""
    retaken = retaken or {}
    problems: list[str] = []
    told: dict[tuple[int, str, int], int] = {}
    received: dict[tuple[int, str, int], int] = {}
    """The messages it had with their body: the answer's index."""
    answers = listener.answers
    for k, a in enumerate(answers):
        body, before = a.body, a.before
        epoch = body["epoch"]
        b = bc.of(epoch)
        if b is None:
            continue
        where = f"answer at {a.at:.3f} (node {a.node})"
        head, phead = max(body["seq"], body["iseq"]), body.get("pseq") or 0
        for lane, items, key_name, reach in (
                ("room", body["important"] + body["messages"], "seq", head),
                ("personal", body.get("personal", ()), "pseq", phead)):
            for m in items:
                key = (b, lane, m[key_name])
                if m.get("body") is None:
                    continue
                received.setdefault(key, k)
                target = targets.get(key)
                # "every later answer [...] on every node, carries the
                # tombstone instead"
                if (target is not None and target.notice and reach >= target.notice
                        and a.at >= target.asked and (epoch, target.notice) not in lost_seqs):
                    problems.append(f"{where}: the body of {lane} message {m[key_name]}, "
                                    f"whose recall's notice {target.notice} it reaches")
        for lane, field_name in (("room", "recalled"), ("personal", "precalled")):
            for s in body.get(field_name, ()):
                key = (b, lane, s)
                told[key] = told.get(key, 0) + 1
                if told[key] == 2 and key not in skipped:
                    problems.append(f"{where}: told again of the recall of {lane} message {s}")
        if before is None or body.get("reset") or before["epoch"] != epoch:
            continue
        # "answers carry recalled: [seq, ...] for the recalls after its cursor"
        i0, i1 = before["iseq"], body["iseq"]
        p0, p1 = before.get("pseq") or 0, phead
        kept = retaken.get(epoch)
        reset_later = kept is not None and any(
            later.body.get("reset") or later.body["epoch"] != epoch for later in answers[k + 1:])
        for target in by_broadcast.get(b, ()):
            n = target.notice
            if not n or a.at < target.asked or (epoch, n) in lost_seqs:
                continue
            if reset_later and kept is not None and n > kept[target.lane == "personal"]:
                continue
            if target.lane == "room" and i0 < n <= i1 and target.seq not in body.get(
                    "recalled", ()):
                problems.append(f"{where}: passed notice {n} and did not list message "
                                f"{target.seq} in recalled")
            if (target.lane == "personal" and target.to == listener.uid and p0 < n <= p1
                    and target.seq not in body.get("precalled", ())):
                problems.append(f"{where}: passed notice p{n} and did not list personal "
                                f"message {target.seq} in precalled")
    # A recall done without a notice: who had the body never hears of it.
    for key, k in received.items():
        target = targets.get(key)
        if target is None or not target.done or target.notice or told.get(key):
            continue
        epoch = answers[k].body["epoch"]
        if all(a.body["epoch"] == epoch and not a.body.get("reset") for a in answers[k + 1:]):
            problems.append(f"had the body of {key[1]} message {key[2]} (answer at "
                            f"{answers[k].at:.3f}), whose recall was done, and was never told")
    return problems


# mute, ban, slow mode ----------------------------------------------------------------------


class Sanctions:
    """The moderation actions by what they act on: ``("mute", uid)``,
    ``("ban", uid)``, ``("slow", "")``."""

    def __init__(self, acts: list[Act], lossy: list[tuple[float, float]] = (),  # type: ignore[assignment]
                 reach: float = REACH, starts: dict[int, list[float]] | None = None) -> None:
        self.reach = reach
        self.starts = starts or {}
        """Per node: when it started (a restart, a kill's)."""
        self.acts: dict[tuple[str, str], list[Act]] = {}
        for act in sorted(acts, key=lambda a: a.issued):
            if any(act.issued <= to and act.acked >= since for since, to in lossy):
                # Maybe applied in a second a Redis restart lost.
                act = replace(act, maybe=True)
            family = act.action.removeprefix("un")
            self.acts.setdefault((family, act.uid), []).append(act)

    def surely(self, family: str, uid: str, node: int, t0: float, t1: float,
               t1_ms: int) -> Act | None:
        """The mute (ban, slow mode) in force on ``node`` from ``t0`` to
        ``t1`` for certain: given, reached the node (at once on the node it
        went through, within :data:`REACH` elsewhere), not lifted or changed
        by then, not ended by ``t1_ms``. None when there is none or it is
        not certain."""
        every = self.acts.get((family, uid), [])
        acts = [a for a in every if not a.maybe]
        i = bisect.bisect_right([a.issued for a in acts], t0) - 1
        if i < 0:
            return None
        act = acts[i]
        if act.action not in ("mute", "ban", "slow") or (act.action == "slow" and not act.seconds):
            return None
        if act.acked + (0.0 if node == act.node else self.reach) > t0:
            return None
        # A node (re)started since reads the actions from the store: within
        # the reach of its start.
        started = [t for t in self.starts.get(node, ()) if act.issued < t <= t0]
        if started and started[-1] + self.reach > t0:
            return None
        if i + 1 < len(acts) and acts[i + 1].issued <= t1:
            return None
        # An action answered 503 may have been applied any time until its
        # answer (and a second later elsewhere): after this one, maybe.
        if any(a.issued <= t1 and a.acked >= act.issued for a in every if a.maybe):
            return None
        if family != "slow" and act.seconds and t1_ms >= act.issued_ms + act.seconds * 1000:
            return None
        return act

    def possibly(self, family: str, uid: str, t: float, t_ms: int) -> bool:
        """Whether a mute (ban) may be in force somewhere at ``t``: one was
        given, and was not lifted everywhere by then nor ended."""
        acts = [a for a in self.acts.get((family, uid), []) if a.issued <= t]
        for i, act in enumerate(acts):
            if act.action != family:
                continue
            if act.seconds and t_ms >= act.issued_ms + act.seconds * 1000:
                continue  # ended
            if any(later.acked + self.reach <= t for later in acts[i + 1:] if not later.maybe):
                continue
            return True
        return False


_PAST = {"mute": "muted", "ban": "banned"}


def check_moderation(run: FeatureRun, listeners: list[SimListener]) -> list[str]:
    problems: list[str] = []
    sanctions = Sanctions(run.acts, run.lossy, run.reach, run.starts)
    uids = {s.uid for s in run.sends} | {a.uid for a in run.acts if a.uid}
    for send in run.sends:
        for family in ("mute", "ban"):
            given = sanctions.surely(family, send.uid, send.node, send.at, send.at, send.ts)
            if send.status == 201 and given is not None:
                # "Mute: the uid's sends get 403 muted"; "Ban: its polls and sends get 403"
                problems.append(f"{send.uid}: send at {send.at:.3f} (node {send.node}) stored "
                                f"as seq {send.seq}, {_PAST[family]} at {given.acked:.3f} through "
                                f"node {given.node}")
        error = {"muted": "mute", "banned": "ban"}.get(send.error)
        if error and not sanctions.possibly(error, send.uid, send.at, send.ts):
            problems.append(f"{send.uid}: send at {send.at:.3f} (node {send.node}) refused as "
                            f"{send.error}, no {error} in force")
    for tap in run.taps:
        if tap.uid not in uids:
            continue
        for family in ("mute", "ban"):
            given = sanctions.surely(family, tap.uid, tap.node, tap.start, tap.at,
                                     _ms(tap.at))
            if given is not None:
                # "A banned or muted uid's likes are refused"
                problems.append(f"{tap.uid}: {tap.n} taps acknowledged at {tap.at:.3f} (node "
                                f"{tap.node}), {_PAST[family]} at {given.acked:.3f} through node "
                                f"{given.node}")
    for attempt in run.recalls:
        if not attempt.by.startswith("uid:") or attempt.outcome != "done":
            continue
        uid = attempt.by[4:]
        for family in ("mute", "ban"):
            # In force for the whole request, as for taps: the node checks
            # when it gets to it (after the room gate, which may wait for a
            # pull), and a sanction lifted meanwhile no longer applies.
            given = sanctions.surely(family, uid, attempt.node, attempt.start, attempt.at,
                                     _ms(attempt.at))
            if given is not None:
                # "its sender recalls its own normal messages [...] unless it
                # is banned or muted in the room"
                problems.append(f"{uid}: own recall of message {attempt.seq} at "
                                f"{attempt.start:.3f} (node {attempt.node}) done, "
                                f"{_PAST[family]} at {given.acked:.3f} through node "
                                f"{given.node}")
    # "Slow mode: each uid may send one normal message per seconds-second
    # window (counted in the store with the sender rate limits, so across
    # nodes too)", a window sliding in tenths.
    slowed: dict[tuple[str, int], Send] = {}
    for send in sorted((s for s in run.sends if s.status == 201), key=lambda s: s.at):
        if any(since <= send.at <= to + 2.0 for since, to in run.lossy):
            continue  # maybe lost by a Redis restart, with its window's count
        act = sanctions.surely("slow", "", send.node, send.at, send.at, send.ts)
        if act is None:
            continue
        key = (send.uid, id(act))
        before = slowed.get(key)
        tenth = act.seconds * 100
        if before is not None and send.ts // tenth - before.ts // tenth < 10:
            problems.append(f"{send.uid}: sends at {before.at:.3f} (node {before.node}) and "
                            f"{send.at:.3f} (node {send.node}) both stored in slow mode "
                            f"{act.seconds} s")
        slowed[key] = send
    for listener in listeners:
        if listener.uid in uids:
            problems += [f"{listener.uid}: {p}" for p in _check_bans(listener, sanctions)]
    return problems


def _check_bans(listener: SimListener, sanctions: Sanctions) -> list[str]:
    problems: list[str] = []
    uid = listener.uid
    polls = [(a.sent, a.at, a.node, a.generation, 200, "") for a in listener.answers]
    polls += listener.refusals
    for sent, at, node, _, status, error in polls:
        sent_ms = _ms(sent)
        given = sanctions.surely("ban", uid, node, sent, sent, sent_ms)
        if given is not None and error != "banned" and status != 503:
            # (a 503: the node could not serve it at all, the store away)
            # "Ban: its polls and sends get 403 banned"
            problems.append(f"poll sent at {sent:.3f} (node {node}) answered {status}, banned "
                            f"at {given.acked:.3f} through node {given.node}")
        if error == "banned" and not sanctions.possibly("ban", uid, at, _ms(at)):
            problems.append(f"poll sent at {sent:.3f} (node {node}) refused as banned at "
                            f"{at:.3f}, no ban in force")
    # "its polls held on any node are answered with that 403 within a second"
    for ban in sanctions.acts.get(("ban", uid), []):
        if ban.action != "ban" or ban.maybe:
            # A ban answered 503 (or given in a second a restart lost) may
            # not be in force at all (redis seed 83792: given while Redis
            # was down, its held poll rightly answered 200).
            continue
        due = ban.acked + sanctions.reach
        due_ms = _ms(due)
        changed = any(a.issued <= due and a.issued > ban.issued
                      for a in sanctions.acts[("ban", uid)])
        if changed or (ban.seconds and due_ms >= ban.issued_ms + ban.seconds * 1000):
            continue
        for sent, at, node, _, status, _ in polls:
            if sent <= ban.issued and at > due + 1e-6:
                problems.append(f"poll sent at {sent:.3f} (node {node}), held when it was "
                                f"banned at {ban.acked:.3f}, answered {status} only at "
                                f"{at:.3f}")
    return problems
