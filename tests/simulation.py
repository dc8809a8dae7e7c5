"""A deterministic simulation of the listener path, replayable from a seed.

In the style of FoundationDB's simulation and TigerBeetle's VOPR: the real
proxy, recvsvr and statsvr of one to three nodes (built by
:func:`liveroom.node.build_node`) over one memory engine run on
:class:`SimLoop`, a pure-Python asyncio loop whose time is virtual and which
runs its ready callbacks one at a time, in an order drawn from the seed. The
same seed draws the cluster (nodes, tiers), the traffic (listeners,
publishers, personal messages) and the faults:

- a notify lost (the fallback pull must cover it) or delayed;
- a pull delayed, or failed (``StoreUnavailable``);
- a node restarted (its held polls answered, its cache gone);
- an epoch renewed (a failover that lost writes), a broadcast ended;
- a listener moving to another node between two polls;
- a write through a node (a send, a recall) delayed, or failed (and a
  recall's answer lost after the store ran it).

Listeners poll through :meth:`proxy.polls.poll.Polls.start` (no HTTP: the front and
aiohttp have their own suites) and keep a ledger of every answer; publishers
keep one of every append. :func:`check` then says, for every listener:

- its epochs never go back (a reset is into a newer epoch, never the absent
  one once it read a real one);
- per epoch, delivered + ``gap`` = sent, ``igap`` = 0 (no important message
  lost within its window), in order, nothing twice;
- personal messages reach only their addressee, exactly once, ``pgap`` = 0;
- every poll a running node took is answered within its timeout and the
  tier's interval, and once the faults stop every listener reaches the head.

The newer features (likes, gifts and the ranking, recalls, mute, ban and
slow mode, and nodes killed) are in ``tests/sim_features.py``: its actors
start with the traffic and its checks join :func:`check`'s, on every engine
(on Redis their ledgers allow what Redis may do: see that module).

Run it with ``scripts/simulate`` (``--help``); a failure prints its seed and
the one line that replays it. docs/development.md ("The simulator") says how
to add a fault or an invariant. One seed's run is exact only with the same
``PYTHONHASHSEED`` (``scripts/simulate`` sets 0).
"""

from __future__ import annotations

import argparse
import asyncio
import asyncio.base_events
import contextlib
import heapq
import json
import logging
import random
import sys
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import sim_features
from sim_redis import (
    ENGINES,
    NodeNotifier,
    RedisFaults,
    SimRedis,
    SimRedisStore,
    drawn_from,
    server,
)

from liveroom.errors import StoreUnavailable
from liveroom.model import NewMessage
from liveroom.node import Node, build_node
from liveroom.settings import Settings, parse_tiers
from liveroom.snapshot import ABSENT_EPOCH
from liveroom.store.base import Pulled, PullRequest
from liveroom.store.memory import MemoryStore
from liveroom.store.memory import log as memory_log
from liveroom.store.redis import keys as redis_keys

ROOM = "sim"
TOKENS = dict(admin_token="sim-admin-token-0123456789", publisher_token="sim-pub-0123456789",
              secret="sim-secret-0123456789")


class Stalled(RuntimeError):
    """Nothing ready and no timer: the simulated world deadlocked."""


class SimLoop(asyncio.base_events.BaseEventLoop):
    """An event loop with virtual time that runs one ready callback at a time,
    chosen by ``rng``. Time moves only when nothing is ready: to the next
    timer (an infinitely fast CPU, so every interleaving of work that is ready
    together is possible, and none depends on the machine's speed). No I/O."""

    def __init__(self, rng: random.Random) -> None:
        super().__init__()
        self.rng = rng
        self._now = 0.0
        self.callbacks = 0

    def time(self) -> float:
        return self._now

    def _write_to_self(self) -> None:  # no selector to wake
        pass

    def _process_events(self, event_list: Any) -> None:
        pass

    def _run_once(self) -> None:
        scheduled = self._scheduled
        ready = self._ready
        while scheduled and scheduled[0]._cancelled:
            self._timer_cancelled_count -= 1
            heapq.heappop(scheduled)._scheduled = False
        if not ready:
            if not scheduled:
                raise Stalled("nothing is ready and no timer is set")
            self._now = max(self._now, scheduled[0]._when)
        while scheduled and scheduled[0]._when <= self._now:
            handle = heapq.heappop(scheduled)
            handle._scheduled = False
            if handle._cancelled:
                self._timer_cancelled_count -= 1
            else:
                ready.append(handle)
        if not ready:
            return
        i = self.rng.randrange(len(ready))
        ready.rotate(-i)
        handle = ready.popleft()
        ready.rotate(i)
        if not handle._cancelled:
            self.callbacks += 1
            handle._run()


class LoopClock:
    """The nodes' clock: the loop's virtual time."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def time(self) -> float:
        return 1_700_000_000.0 + self._loop.time()

    def monotonic(self) -> float:
        return 1000.0 + self._loop.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


# -- faults -----------------------------------------------------------------------------


@dataclass
class Faults:
    """How often each fault strikes (drawn per seed)."""

    notify_lost: float = 0.0
    notify_delayed: float = 0.0
    pull_delayed: float = 0.0
    pull_failed: float = 0.0
    restarts: int = 0
    renewals: int = 0
    ends: int = 0
    move: float = 0.0
    """A listener's chance to poll another node next."""
    write_delay: float = 0.0
    """The longest round trip of a write through a node (a send, a recall)."""
    write_failed: float = 0.0
    """A write's chance to fail: half before the store runs it, half (a
    recall only) after, its answer lost."""


class FaultyLog:
    """A node's view of the shared log: pulls yield, and may be delayed or fail."""

    def __init__(self, log: Any, rng: random.Random, faults: Faults,
                 truth: Truth | None = None) -> None:
        self._log = log
        self._rng = rng
        self._faults = faults
        self._truth = truth

    async def renew_epoch(self, room: str, stale: str) -> str:
        """A node renews an epoch (it found the store behind its copy): the
        ledger learns the new epoch, which kept the stale one's log."""
        truth = self._truth
        try:
            epoch: str = await self._log.renew_epoch(room, stale)
        except StoreUnavailable:
            if truth is not None:
                # Its reply may have been lost after the store renewed: the
                # first pull to find an epoch the ledger does not know takes
                # it for this renewal (redis seed 118003).
                truth.renewing[room] = stale
            raise
        if truth is not None and epoch != stale:
            # A room a Redis restart lost whole has no log to keep: the
            # renewal made a new one.
            truth.renewed(epoch, stale)
        return epoch

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)

    async def pull(self, requests: Sequence[PullRequest]) -> list[Pulled]:
        rng, faults = self._rng, self._faults
        if rng.random() < faults.pull_delayed:
            await asyncio.sleep(rng.uniform(0.01, 1.5))
        else:
            await asyncio.sleep(0)  # a round trip: others run meanwhile
        if rng.random() < faults.pull_failed:
            raise StoreUnavailable("simulated pull failure")
        pulled: list[Pulled] = await self._log.pull(requests)
        truth = self._truth
        if truth is not None and truth.renewing:
            for p in pulled:
                stale = truth.renewing.get(p.room)
                if stale is not None and p.epoch and p.epoch not in truth.epochs:
                    del truth.renewing[p.room]
                    truth.renewed(p.epoch, stale)
        await asyncio.sleep(0)
        return pulled

    async def append(self, room: str, message: NewMessage, *args: Any, **kwargs: Any) -> Any:
        # Its answer is never lost: a send stored is known by its 201 alone.
        return await self._write(lambda: self._log.append(room, message, *args, **kwargs),
                                 answer_lost=False)

    async def recall(self, room: str, seq: int, **kwargs: Any) -> Any:
        return await self._write(lambda: self._log.recall(room, seq, **kwargs),
                                 answer_lost=True)

    async def _write(self, call: Callable[[], Coroutine[Any, Any, Any]], *,
                     answer_lost: bool) -> Any:
        """A write's round trip: it may fail before the store runs it, or
        (``answer_lost``) after, its answer lost; either raises StoreUnavailable."""
        rng, faults = self._rng, self._faults
        await asyncio.sleep(rng.uniform(0.0, faults.write_delay) if faults.write_delay else 0)
        draw = rng.random() if faults.write_failed else 1.0
        if draw < faults.write_failed / 2:
            raise StoreUnavailable("simulated write failure")
        done = await call()
        await asyncio.sleep(0)
        if answer_lost and draw < faults.write_failed:
            raise StoreUnavailable("simulated lost answer")
        return done


@dataclass
class StoreView:
    """What :func:`build_node` takes of a store: the shared engine's parts,
    with this node's faulty log."""

    log: Any
    notifier: Any
    stats: Any
    operators: Any
    counters: Any
    moderation: Any
    review: Any
    filters: Any
    outbox: Any = None
    """No webhooks in the simulated worlds: their routes answer an empty list."""
    name: str = "memory"

    async def ping(self) -> None:
        return None


class SimNode:
    """One node's roles over the shared store; restartable."""

    def __init__(self, world: World, index: int) -> None:
        self.world = world
        self.index = index
        self.node: Node | None = None
        self.generation = 0
        self.notifier: NodeNotifier | None = None
        """Its notify channel, on the Redis engine."""
        world.store.notifier.subscribe(self._notify, self._resync)

    @property
    def running(self) -> bool:
        return self.node is not None

    async def start(self) -> None:
        if self.node is not None:  # started meanwhile (a restart and a kill together)
            return
        world = self.world
        store = world.store
        if isinstance(store, SimRedisStore):
            parts = store.node_parts()
            self.notifier = NodeNotifier(store.sim, world.rng, self._resync)
            counters = sim_features.FlushedCounters(world, self.index, parts.counters)
            view = StoreView(FaultyLog(parts.log, world.rng, world.faults, world.truth),
                             self.notifier,
                             parts.stats, parts.operators, counters, parts.moderation,
                             parts.review, parts.filters, name="redis")
        else:
            counters = sim_features.FlushedCounters(world, self.index, store.counters)
            view = StoreView(FaultyLog(store.log, world.rng, world.faults, world.truth),
                             store.notifier,
                             store.stats, store.operators, counters, store.moderation,
                             store.review, store.filters)
        node = build_node(replace(world.settings, node_id=f"n{self.index}"), world.clock,
                          store=view)  # type: ignore[arg-type]
        await node.vip_list.start()
        await node.recvsvr.start()
        await node.statsvr.start()
        await node.proxy.start()
        self.generation += 1
        self.node = node
        if world.features is not None:
            world.features.starts.setdefault(self.index, []).append(world.loop.time())

    async def stop(self) -> None:
        node, self.node = self.node, None
        if node is None:
            return
        await node.proxy.stop()
        sim_features.stopped(self.world, node)
        await node.vip_list.stop()
        await node.recvsvr.stop()
        await node.statsvr.stop()

    def _notify(self, room: str, seq: int) -> None:
        rng, faults, loop = self.world.rng, self.world.faults, self.world.loop
        if self.notifier is not None and not self.notifier.hears(room):
            return  # sharded: not subscribed (yet) to the room's channel
        draw = rng.random()
        if draw < faults.notify_lost:
            return
        if draw < faults.notify_lost + faults.notify_delayed:
            loop.call_later(rng.uniform(0.01, 2.0), self._deliver, room, seq)
        else:
            loop.call_soon(self._deliver, room, seq)

    def _deliver(self, room: str, seq: int) -> None:
        if self.node is not None:
            self.node.recvsvr.on_notify(room, seq)

    def _resync(self, rooms: Any = None) -> None:
        if self.node is not None:
            self.node.recvsvr.on_resync(rooms)


# -- the ledger -------------------------------------------------------------------------


@dataclass
class Answer:
    """One answer a listener got, with the cursor it polled with."""

    at: float
    node: int
    before: dict[str, Any] | None
    body: dict[str, Any]
    generation: int = 0
    """The node's generation (its starts) that answered."""
    sent: float = 0.0
    """When the poll was sent."""


@dataclass
class Truth:
    """What the store holds, as the publishers and faults saw it."""

    epochs: list[str] = field(default_factory=lambda: [ABSENT_EPOCH])
    """In the order they were made."""
    sent: dict[str, dict[int, bool]] = field(default_factory=dict)
    """Per epoch: seq -> important."""
    personal: dict[str, dict[int, str]] = field(default_factory=dict)
    """Per epoch: pseq -> addressee."""
    bodies: dict[tuple[str, str], dict[int, Any]] = field(default_factory=dict)
    """Per (``"room"`` or ``"personal"``, epoch): seq -> the body stored there last."""
    lost: set[tuple[str, str, int, Any]] = field(default_factory=set)
    """(kind, epoch, seq, body) acknowledged, then lost by a Redis restart."""
    gone: set[str] = field(default_factory=set)
    """Epochs a Redis restart lost with their whole log (made in the second
    it lost): their listeners are rightly reset into the absent epoch."""
    carried: dict[str, str] = field(default_factory=dict)
    """A renewed epoch -> the epoch whose log it kept (its broadcast's)."""
    rewound: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Per epoch: the lowest room and personal heads a lossy Redis restart
    kept of its log (positions past them may have been taken twice)."""
    renewing: dict[str, str] = field(default_factory=dict)
    """Per room: the epoch a node's renewal, answered with a failure, would
    have renewed (the store may have done it)."""

    def epoch_seen(self, epoch: str, carried: str | None = None) -> None:
        """``epoch`` exists now; ``carried``: the epoch whose log it kept (a renewal)."""
        if epoch in self.epochs:
            return
        self.epochs.insert(self._made_at(carried), epoch)
        if carried:
            self.carried[epoch] = carried
        self.sent[epoch] = dict(self.sent.get(carried, {})) if carried else {}
        self.personal[epoch] = dict(self.personal.get(carried, {})) if carried else {}
        for kind in ("room", "personal"):
            self.bodies[kind, epoch] = dict(self.bodies.get((kind, carried or ""), {}))
        if carried:
            self.lost |= {(kind, epoch, seq, body) for kind, e, seq, body in self.lost
                          if e == carried}
            if carried in self.rewound:
                self.rewound[epoch] = self.rewound[carried]

    def renewed(self, epoch: str, stale: str) -> None:
        """``epoch`` renewed ``stale``: it kept its log, unless a Redis restart
        lost that whole (then the renewal made a new one)."""
        self.epoch_seen(epoch, carried=None if stale in self.gone else stale)

    def root(self, epoch: str) -> str:
        """The first epoch of ``epoch``'s broadcast (renewals followed back)."""
        while epoch in self.carried:
            epoch = self.carried[epoch]
        return epoch

    def _made_at(self, carried: str | None) -> int:
        """Where in :attr:`epochs` an epoch renewed from ``carried`` goes: a
        node's renewal may be answered late (its reply held), after an end
        made a newer broadcast's epoch; the renewal ran while ``carried`` was
        current, so before any epoch of another broadcast heard of since
        (redis seed 96784). A Redis restart never brings back an epoch an
        end replaced (see :func:`strike`)."""
        if not carried or carried not in self.epochs:
            return len(self.epochs)
        root = self.root(carried)
        for i in range(self.epochs.index(carried) + 1, len(self.epochs)):
            if self.root(self.epochs[i]) != root:
                return i
        return len(self.epochs)

    def stored(self, kind: str, epoch: str, seq: int, body: Any) -> None:
        """An append acknowledged at ``seq`` (of the room's or the personal
        numbering) of ``epoch``."""
        self.bodies.setdefault((kind, epoch), {})[seq] = body

    def lose_after(self, epoch: str, head: int, phead: int) -> int:
        """A restart kept ``epoch``'s log up to ``head`` (personal: ``phead``):
        what was acknowledged after is lost (it stays in the ledger until a
        later append takes its seq). How many were lost."""
        before = len(self.lost)
        kept = self.rewound.get(epoch, (head, phead))
        self.rewound[epoch] = (min(kept[0], head), min(kept[1], phead))
        for kind, last in (("room", head), ("personal", phead)):
            for seq, body in self.bodies.get((kind, epoch), {}).items():
                if seq > last:
                    self.lost.add((kind, epoch, seq, body))
        return len(self.lost) - before

    def reused(self) -> dict[str, set[tuple[str, str, int, Any]]]:
        """Per epoch: the lost messages whose seq a later message took."""
        taken: dict[str, set[tuple[str, str, int, Any]]] = {}
        for lost in self.lost:
            kind, epoch, seq, body = lost
            if self.bodies.get((kind, epoch), {}).get(seq) != body:
                taken.setdefault(epoch, set()).add(lost)
        return taken

    def present(self, kind: str, epoch: str) -> dict[int, Any]:
        """``epoch``'s seqs the store holds now (not lost)."""
        return {seq: body for seq, body in self.bodies.get((kind, epoch), {}).items()
                if (kind, epoch, seq, body) not in self.lost}


class SimListener:
    """A listener polling the room through the nodes, keeping every answer."""

    def __init__(self, world: World, uid: str) -> None:
        self.world = world
        self.uid = uid
        self.answers: list[Answer] = []
        self.cursor: dict[str, Any] | None = None
        self.node = world.rng.randrange(len(world.nodes))
        self.hung: list[str] = []
        self.refused = 0
        self.refusals: list[tuple[float, float, int, int, int, str]] = []
        """Polls answered with an error: (sent, answered, node, generation,
        status, error): 503, or 403 ``banned`` (a chatter, sim_features)."""

    def query(self) -> dict[str, str]:
        query = {"uid": self.uid, "timeout": str(self.world.timeout)}
        if self.cursor is not None:
            for name in ("epoch", "seq", "iseq", "ctx", "pseq"):
                if self.cursor.get(name) is not None:
                    query[name] = str(self.cursor[name])
        return query

    async def run(self, until: float) -> None:
        world, loop, rng = self.world, self.world.loop, self.world.rng
        while loop.time() < until:
            if rng.random() < world.faults.move:
                self.node = rng.randrange(len(world.nodes))
            sim = world.nodes[self.node]
            if sim.node is None:  # down: try another one a moment later
                self.node = rng.randrange(len(world.nodes))
                await asyncio.sleep(rng.uniform(0.05, 0.5))
                continue
            generation = sim.generation
            got: asyncio.Future[Any] = loop.create_future()

            def reply(r: Any, got: asyncio.Future[Any] = got) -> None:
                if not got.done():
                    got.set_result(r)

            sent_at = loop.time()
            poll = sim.node.proxy.polls.start(ROOM, self.query(), "application/json", reply)
            limit = world.timeout + world.interval_max + 5.0
            try:
                r = await asyncio.wait_for(asyncio.shield(got), limit)
            except TimeoutError:
                if poll is not None:
                    poll.cancel()
                if sim.generation == generation and sim.node is not None:
                    self.hung.append(f"poll sent at {sent_at:.3f} on node {self.node} "
                                     f"unanswered after {limit:g} s")
                continue
            if r.status != 200:
                error = json.loads(r.body).get("error", "")
                assert r.status == 503 or error == "banned", (r.status, r.body)
                self.refusals.append((sent_at, loop.time(), self.node, generation, r.status,
                                      error))
                self.refused += 1
                await asyncio.sleep(rng.uniform(0.05, 0.5))
                continue
            body = json.loads(r.body)
            self.answers.append(Answer(loop.time(), self.node, self.cursor, body, generation,
                                       sent_at))
            self.cursor = body
            if rng.random() < 0.2:  # a client's think time between polls
                await asyncio.sleep(rng.uniform(0, 0.3))
            else:
                await asyncio.sleep(0)


# -- the world ---------------------------------------------------------------------------


@dataclass
class World:
    seed: int
    loop: SimLoop
    rng: random.Random
    faults: Faults
    settings: Settings
    store: MemoryStore | SimRedisStore
    clock: LoopClock
    timeout: int
    interval_max: float
    truth: Truth = field(default_factory=Truth)
    drawn: Faults = field(default_factory=Faults)
    """The faults as drawn (``faults`` is cleared for the quiet at the end)."""
    nodes: list[SimNode] = field(default_factory=list)
    listeners: list[SimListener] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    engine: str = "memory"
    redis_faults: RedisFaults = field(default_factory=RedisFaults)

    @property
    def redis(self) -> SimRedis | None:
        return self.store.sim if isinstance(self.store, SimRedisStore) else None
    features: Any = None
    """The newer features' world and ledgers (``sim_features.FeatureRun``)."""

    def note(self, text: str) -> None:
        self.events.append(f"{self.loop.time():9.3f} {text}")


def draw_world(seed: int, loop: SimLoop, engine: str = "memory") -> World:
    """The world of ``seed`` on ``engine`` (one of :data:`sim_redis.ENGINES`):
    the same seed draws the same world on each, but for the Redis faults."""
    rng = random.Random(seed)
    loop.rng = rng
    tiered = rng.random() < 0.4
    faults = Faults(
        notify_lost=rng.choice([0.0, 0.05, 0.3]),
        notify_delayed=rng.choice([0.0, 0.1, 0.5]),
        pull_delayed=rng.choice([0.0, 0.05, 0.3]),
        pull_failed=rng.choice([0.0, 0.0, 0.05]),
        restarts=rng.choice([0, 0, 1, 2]),
        renewals=rng.choice([0, 1, 2]),
        ends=rng.choice([0, 0, 1]),
        move=rng.choice([0.0, 0.1, 0.5]),
        write_delay=rng.choice([0.0, 0.0, 0.02]),
        write_failed=rng.choice([0.0, 0.0, 0.1]),
    )
    timeout = rng.choice([2, 5])
    settings = Settings(store="memory", **TOKENS, poll_timeout=timeout,
                        tiers=parse_tiers("1:0.5,6:1" if tiered else "off"),
                        hold_tick=0.1, heartbeat_flush=0.2, merge_every=0.5,
                        first_pull_timeout=3.0, fallback_pull_interval=1.0)
    clock = LoopClock(loop)
    store: MemoryStore | SimRedisStore
    redis_faults = RedisFaults()
    if engine == "memory":
        store = MemoryStore(settings.log_policy(), clock)
    else:
        redis_faults = RedisFaults(
            request_held=rng.choice([0.0, 0.05, 0.2]),
            reply_held=rng.choice([0.0, 0.05, 0.2]),
            reply_lost=rng.choice([0.0, 0.0, 0.02]),
            restarts=rng.choice([0, 0, 1, 2]),
            lossy_restarts=rng.choice([0, 0, 1]),
        )
        sim = SimRedis(server(), loop, rng, redis_faults, sharded=engine == "redis-sharded")
        store = SimRedisStore(sim, settings.log_policy())
    world = World(seed, loop, rng, faults, settings, store, clock, timeout,
                  interval_max=1.0 if tiered else 0.0, drawn=faults, engine=engine,
                  redis_faults=redis_faults)
    for i in range(rng.choice([1, 2, 3])):
        world.nodes.append(SimNode(world, i))
    features = sim_features.FeatureRun(sim_features.draw_features(rng))
    world.features = features
    return world


async def publish(world: World, until: float) -> None:
    """Appends: normal, important, and personal ones for the listeners."""
    rng, loop, truth = world.rng, world.loop, world.truth
    n = 0
    while loop.time() < until:
        await asyncio.sleep(rng.expovariate(rng.choice([2.0, 10.0])))
        n += 1
        draw = rng.random()
        to = rng.choice(world.listeners).uid if draw < 0.15 else None
        important = to is not None or draw < 0.35
        message = NewMessage(uid=f"pub{n % 3}", body=n, important=important,
                             ts=int(world.clock.time() * 1000), to=to)
        try:
            appended = await world.store.log.append(ROOM, message)
        except StoreUnavailable:
            continue  # Redis restarting: the call never reached it
        # An epoch first heard of here was renewed by a node (a Redis restart
        # lost writes), its reply not back yet: it kept the log, unless there
        # was no log to keep (the room not made yet, or lost whole). Not told
        # by the seq: a personal message's is its own numbering's, which a
        # restart may rewind to 0 (redis seed 98678).
        last = truth.epochs[-1]
        carried = None if last == ABSENT_EPOCH or last in truth.gone else last
        truth.epoch_seen(appended.epoch, carried=carried)
        if to is None:
            truth.sent[appended.epoch][appended.seq] = important
        else:
            truth.personal[appended.epoch][appended.seq] = to
        truth.stored("room" if to is None else "personal", appended.epoch, appended.seq, n)


async def strike(world: World, until: float) -> None:
    """The faults that are events: restarts, renewals, ends."""
    rng, loop, truth, faults = world.rng, world.loop, world.truth, world.faults
    events: list[tuple[float, str]] = []
    redis = world.redis_faults
    for kind, count in (("restart", faults.restarts), ("renew", faults.renewals),
                        ("end", faults.ends), ("redis restart", redis.restarts),
                        ("redis loses", redis.lossy_restarts)):
        events += [(rng.uniform(1.0, until), kind) for _ in range(count)]
    events.sort()
    saved_at: list[tuple[float, str]] = []
    saved: dict[bytes, tuple[int, bytes]] = {}
    saved_when = 0.0
    for i, (at, kind) in enumerate(events):
        # The second a lossy restart loses: drawn from before it, and never
        # back across an epoch's change (an operator's end, a renewal): what
        # it loses is messages (see sim_redis).
        if kind == "redis loses":
            changes = [t for t, k in events[:i] if k in ("renew", "end", "redis loses")]
            floor = max([0.5, *(t + 0.01 for t in changes)])
            # Never after the restart itself (a change less than 10 ms before
            # it): the restart would put back an older save, or none, across
            # that change (found by redis-sharded seed 90444). The change's
            # event is done before the save's comes: it is awaited.
            saved_at.append((min(at, max(floor, at - rng.uniform(0.0, 1.0))), "redis saves"))
    # A save at its restart's moment goes first.
    for at, kind in sorted(events + saved_at, key=lambda e: (e[0], e[1] != "redis saves")):
        await asyncio.sleep(max(0.0, at - loop.time()))
        sim_redis = world.redis
        if kind == "redis saves" and sim_redis is not None:
            saved, saved_when = sim_redis.snapshot(), loop.time()
        elif kind in ("redis restart", "redis loses") and sim_redis is not None:
            lossy = kind == "redis loses"
            downtime = rng.uniform(0.05, 2.0)
            counted = sim_features.counted(world) if lossy else None
            sim_redis.restart(downtime, saved if lossy else None)
            if counted is not None:
                sim_features.lost_second(world, counted, saved_when)
            lost = 0
            current = truth.epochs[-1]
            if lossy and current != ABSENT_EPOCH:
                meta = sim_redis.conn.hgetall(redis_keys.meta(ROOM))
                head, phead = int(meta.get(b"seq", 0)), int(meta.get(b"ps", 0))
                lost = truth.lose_after(current, head, phead)
                if meta.get(b"epoch", b"").decode() != current:
                    truth.gone.add(current)  # made in the second lost: no log now
            world.note(f"redis restarts, down {downtime:.3f} s"
                       + (f", {lost} acknowledged messages lost" if lossy else ""))
        elif kind == "restart":
            sim = rng.choice(world.nodes)
            world.note(f"restart node {sim.index}")
            await sim.stop()
            await asyncio.sleep(rng.uniform(0.0, 1.0))
            await sim.start()
        elif kind == "renew":
            current = truth.epochs[-1]
            if current == ABSENT_EPOCH:
                continue
            try:
                epoch = await world.store.log.renew_epoch(ROOM, current)
            except StoreUnavailable:
                world.note("renew skipped: Redis is restarting")
                continue
            world.note(f"renew epoch {current} -> {epoch}")
            # A room a Redis restart lost whole has no log to keep: the
            # renewal made a new one (redis seed 104652).
            truth.renewed(epoch, current)
        else:
            try:
                ended = await world.store.operators.end_broadcast(
                    ROOM, int(world.clock.time() * 1000), 86_400_000)
            except StoreUnavailable:
                world.note("end skipped: Redis is restarting")
                continue
            world.note(f"end broadcast -> {ended.epoch}")
            truth.epoch_seen(ended.epoch)


async def simulate(world: World, *, seconds: float = 30.0, quiet: float = 15.0) -> None:
    """Traffic and faults for ``seconds`` of virtual time, then ``quiet``
    seconds with neither, then every node stops."""
    await world.store.start()
    for sim in world.nodes:
        await sim.start()
    rng = world.rng
    world.listeners = [SimListener(world, f"u{i}") for i in range(rng.randint(2, 8))]
    world.listeners += [SimListener(world, uid) for uid in sim_features.chatters(world)]
    end = world.loop.time() + seconds
    tasks = [asyncio.ensure_future(listener.run(end + quiet)) for listener in world.listeners]
    await asyncio.gather(publish(world, end), strike(world, end),
                         *sim_features.actors(world, end))
    world.faults = Faults()  # the quiet: every fault stops
    if world.redis is not None:
        world.redis.faults = RedisFaults()
    for sim in world.nodes:
        if sim.node is None:
            await sim.start()
    await asyncio.gather(*tasks)
    await sim_features.observe_nodes(world)
    for sim in world.nodes:
        await sim.stop()
    await sim_features.observe_store(world)
    await world.store.close()


# -- the checker ---------------------------------------------------------------------------


def check(world: World) -> list[str]:
    """Every broken promise, one line each (empty: all kept)."""
    truth = world.truth
    order = {epoch: i for i, epoch in enumerate(truth.epochs)}
    problems: list[str] = []
    for listener in world.listeners:
        problems += [f"{listener.uid}: {p}" for p in _check_listener(listener, truth, order)]
    return problems + sim_features.check(world)


def _check_listener(listener: SimListener, truth: Truth, order: dict[str, int]) -> list[str]:
    problems = list(listener.hung)
    seen: set[tuple[str, int]] = set()
    pseen: set[tuple[str, int]] = set()
    last_epoch = ABSENT_EPOCH
    # Seqs a Redis restart lost after this listener got them, taken again by
    # later messages: it must leave that epoch (a reset) to get those.
    reused = truth.reused()
    reused_seqs = {epoch: {seq for kind, _, seq, _ in lost if kind == "room"}
                   for epoch, lost in reused.items()}
    stranded: dict[str, list[str]] = {}
    for a in listener.answers:
        body, before = a.body, a.before
        epoch = body["epoch"]
        where = f"answer at {a.at:.3f} (node {a.node})"
        if epoch not in order:
            problems.append(f"{where}: unknown epoch {epoch}")
            continue
        if epoch != last_epoch:
            stranded.pop(last_epoch, None)
            if last_epoch == ABSENT_EPOCH and before is not None \
                    and before["epoch"] == ABSENT_EPOCH:
                # A first poll again (a reset into the absent epoch, its room
                # lost whole, came before): a node whose copy is older than
                # the loss may bring that epoch's messages again, as a first
                # poll brings them (redis seed 108242).
                seen = {key for key in seen if key[0] != epoch}
                pseen = {key for key in pseen if key[0] != epoch}
        elif body.get("reset"):
            # A reset within its epoch (its cursor was past the node's head:
            # the store lost writes) starts over like a first poll: what it
            # brings again is no repeat.
            seen = {key for key in seen if key[0] != epoch}
            pseen = {key for key in pseen if key[0] != epoch}
            stranded.pop(epoch, None)
        # A room whose whole log a Redis restart lost does not exist: its
        # listeners are reset into the absent epoch, and wait there.
        gone = epoch == ABSENT_EPOCH and last_epoch in truth.gone
        if order[epoch] < order[last_epoch] and not gone:
            problems.append(f"{where}: went back from epoch {last_epoch} to {epoch}"
                            f"{' (reset)' if body.get('reset') else ''}")
        last_epoch = epoch if order[epoch] >= order[last_epoch] or gone else last_epoch
        items = body["important"] + body["messages"]
        for m in items:
            key = (epoch, m["seq"])
            if key in seen:
                problems.append(f"{where}: seq {m['seq']} of epoch {epoch} again")
            seen.add(key)
            if ("room", epoch, m["seq"], m.get("body")) in reused.get(epoch, ()):
                stranded.setdefault(epoch, []).append(
                    f"{where}: seq {m['seq']} of {epoch} named {m['body']!r}, lost by a Redis "
                    f"restart; another message took that seq and this listener never left "
                    f"the epoch to get it")
                continue
            if m.get("body") is None and m["seq"] in reused_seqs.get(epoch, ()):
                # A recall's tombstone at a seq a Redis restart lost and a
                # later message took: the lost message's or the later one's,
                # no body tells which, nor its importance (redis seed 93879).
                continue
            if truth.sent.get(epoch, {}).get(m["seq"]) != m["important"]:
                problems.append(f"{where}: seq {m['seq']} was not sent so in {epoch}")
            problems += _same_message(truth, "room", epoch, m["seq"], m.get("body"), where)
        for m in body.get("personal", ()):
            if m["to"] != listener.uid:
                problems.append(f"{where}: personal pseq {m['pseq']} for {m['to']}")
            key = (epoch, m["pseq"])
            if key in pseen:
                problems.append(f"{where}: personal pseq {m['pseq']} again")
            pseen.add(key)
            if ("personal", epoch, m["pseq"], m.get("body")) in reused.get(epoch, ()):
                if truth.personal.get(epoch, {}).get(m["pseq"]) != listener.uid:
                    continue  # the message that took it is another's: nothing to get
                stranded.setdefault(epoch, []).append(
                    f"{where}: pseq {m['pseq']} of {epoch} named {m['body']!r}, lost by a "
                    f"Redis restart; another message took it and this listener never left "
                    f"the epoch to get it")
                continue
            problems += _same_message(truth, "personal", epoch, m["pseq"], m.get("body"), where)
        # Important or personal messages a Redis restart lost before this
        # listener got them are gaps it is right to report.
        lossy = any(e == epoch for _, e, _, _ in truth.lost)
        # A listener that waited on the room from before it existed reads the
        # epoch it finds from its start; when that is a later broadcast than
        # the room's first, the ended ones' messages (gone with their
        # broadcast, as for a listener reset by the end) count in its gaps.
        later = (before is not None and before["epoch"] == ABSENT_EPOCH
                 and epoch not in (ABSENT_EPOCH, truth.epochs[1]))
        if body.get("igap") and not later and not lossy:
            problems.append(f"{where}: igap {body['igap']} (important lost)")
        if body.get("pgap") and not lossy:
            problems.append(f"{where}: pgap {body['pgap']} (personal lost)")
        if body.get("reset") or before is None:
            continue  # a first poll or a reset: a new stretch starts at its cursors
        if epoch in reused:
            # Counted against the ledger as it ends, which holds other
            # messages at the reused seqs: the strandings above say enough.
            continue
        if not (before["epoch"] == epoch or (before["epoch"] == ABSENT_EPOCH
                                             and before["seq"] == 0 and before["iseq"] == 0)):
            problems.append(f"{where}: epoch {before['epoch']} -> {epoch} without a reset")
            continue
        s0, i0 = (before["seq"], before["iseq"]) if before["epoch"] == epoch else (0, 0)
        sent = truth.sent.get(epoch, {})
        normal = sum(1 for s, imp in sent.items() if s0 < s <= body["seq"] and not imp)
        important = sum(1 for s, imp in sent.items() if i0 < s <= body["iseq"] and imp)
        got_n = len(body["messages"])
        got_i = len(body["important"])
        if normal != got_n + body["gap"] and not (later and normal <= got_n + body["gap"]):
            problems.append(f"{where}: {normal} normal sent in ({s0}, {body['seq']}] of "
                            f"{epoch}, {got_n} delivered + gap {body['gap']}")
        if important != got_i + body["igap"] and not (later
                                                      and important <= got_i + body["igap"]):
            problems.append(f"{where}: {important} important sent in ({i0}, {body['iseq']}]"
                            f" of {epoch}, {got_i} delivered + igap {body['igap']}")
        p0, p1 = before.get("pseq") or 0, body.get("pseq") or 0
        if before["epoch"] == epoch:
            mine = sum(1 for p, to in truth.personal.get(epoch, {}).items()
                       if p0 < p <= p1 and to == listener.uid)
            got_p = len(body.get("personal", ()))
            if mine != got_p + body.get("pgap", 0):
                problems.append(f"{where}: {mine} personal for it in ({p0}, {p1}], "
                                f"{got_p} delivered + pgap {body.get('pgap', 0)}")
    for lines in stranded.values():
        problems += lines
    # Liveness: once the faults stopped, everybody reached the head.
    final = truth.epochs[-1]
    if listener.answers and final != ABSENT_EPOCH:
        last = listener.answers[-1].body
        head = max(truth.present("room", final) or [0])
        if last["epoch"] != final or max(last["seq"], last["iseq"]) < head:
            problems.append(f"never caught up: last answer at {last['epoch']} "
                            f"{last['seq']}/{last['iseq']}, head {final} {head}")
    return problems


def _same_message(truth: Truth, kind: str, epoch: str, seq: int, body: Any,
                  where: str) -> list[str]:
    """Within an epoch, a seq names one message: the one the store holds (or
    held: a message a Redis restart lost is checked by the caller)."""
    stored = truth.bodies.get((kind, epoch), {}).get(seq)
    if stored is None or body is None or stored == body:
        return []  # not the publishers' (a chatter's), or a recall's tombstone
    what = "pseq" if kind == "personal" else "seq"
    return [f"{where}: {what} {seq} of {epoch} carries {body!r}, the store {stored!r}"]


# -- running seeds --------------------------------------------------------------------------


@dataclass
class Outcome:
    seed: int
    problems: list[str]
    world: World
    callbacks: int


def run_seed(seed: int, *, seconds: float = 30.0, engine: str = "memory",
             patch: Callable[[World], None] | None = None) -> Outcome:
    """Run one seed in a fresh loop; ``patch`` may change the drawn world."""
    random.seed(seed)  # anything the product draws from the module's generator
    rng = random.Random(seed)
    loop = SimLoop(rng)
    world = draw_world(seed, loop, engine)
    if patch is not None:
        patch(world)
    asyncio.set_event_loop(loop)
    # Epochs are random names: drawn from the seed here, so a replay names
    # them alike (and signs the same contexts).
    made_up = memory_log.new_epoch
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    memory_log.new_epoch = lambda: "".join(rng.choice(alphabet) for _ in range(12))
    try:
        with drawn_from(rng):
            main: Coroutine[Any, Any, None] = simulate(world, seconds=seconds)
            loop.run_until_complete(main)
        problems = check(world)
    except Stalled as exc:
        problems = [f"stalled: {exc}"]
    finally:
        memory_log.new_epoch = made_up
        _unwind(loop)
        asyncio.set_event_loop(None)
        loop.close()
    return Outcome(seed, problems, world, loop.callbacks)


def _unwind(loop: SimLoop) -> None:
    """Cancel what killed nodes left running and let it unwind before the
    loop closes, as ``asyncio.run`` does (after the checks: nothing of it is
    judged). Else the collector closes their coroutines later, on a closed
    loop, and each prints a traceback into a long run's log."""
    left = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in left:
        task.cancel()
    if left:
        with contextlib.suppress(Exception):  # Stalled: what is left stays left
            loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))


def replay_line(seed: int, engine: str = "memory") -> str:
    where = "" if engine == "memory" else f" --engine {engine}"
    return f"scripts/simulate{where} --seed {seed} --verbose"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/simulate",
        description="Run the deterministic simulation of the listener path: one to three "
                    "nodes over the memory or the redis engine on a seeded scheduler with "
                    "virtual time, with faults (notifies lost or late, pulls late or failed, node "
                    "restarts, epoch renewals, ended broadcasts, listeners moving; on Redis, "
                    "round trips held or lost and Redis restarts). Each "
                    "seed is one world; a failing seed prints the line that replays it.")
    parser.add_argument("--seed", type=int, help="run this one seed")
    parser.add_argument("--seeds", type=int, default=100,
                        help="how many seeds to run (from --first; default 100)")
    parser.add_argument("--first", type=int, default=0, help="the first seed (default 0)")
    parser.add_argument("--seconds", type=float, default=30.0,
                        help="virtual seconds of traffic and faults per seed (default 30)")
    parser.add_argument("--engine", choices=ENGINES, default="memory",
                        help="the store the nodes share: the memory engine, or the redis "
                             "engine with its Lua scripts on a real redis-server (started "
                             "here), with one notify channel (redis) or a cluster's "
                             "sharded notifies per room (redis-sharded); default memory")
    parser.add_argument("--verbose", action="store_true",
                        help="print the world drawn, its fault events and every problem")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.CRITICAL)  # nodes log the faults they survive
    seeds = [args.seed] if args.seed is not None else range(args.first,
                                                            args.first + args.seeds)
    failed: list[int] = []
    started = time.perf_counter()
    last_report = started
    total = len(seeds)
    for done, seed in enumerate(seeds, 1):
        outcome = run_seed(seed, seconds=args.seconds, engine=args.engine)
        if args.verbose:
            w = outcome.world
            print(f"seed {seed}: {len(w.nodes)} nodes, {len(w.listeners)} listeners, "
                  f"tiers {w.settings.tiers}, {w.drawn}"
                  + (f", {w.redis_faults}" if w.redis is not None else "")
                  + f"; {outcome.callbacks} callbacks")
            for event in w.events:
                print(f"  {event}")
        if outcome.problems:
            failed.append(seed)
            print(f"seed {seed} FAILED ({len(outcome.problems)} problems); replay: "
                  f"{replay_line(seed, args.engine)}")
            for problem in outcome.problems[:20 if args.verbose else 3]:
                print(f"  {problem}")
        now = time.perf_counter()
        if now - last_report >= 10 or done == total:
            last_report = now
            print(f"{done}/{total} seeds, {len(failed)} failed, "
                  f"{done / (now - started):.1f} seeds a second", flush=True)
    print(f"{total - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
