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
- a listener moving to another node between two polls.

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

Run it with ``scripts/simulate`` (``--help``); a failure prints its seed and
the one line that replays it. docs/development.md ("The simulator") says how
to add a fault or an invariant. One seed's run is exact only with the same
``PYTHONHASHSEED`` (``scripts/simulate`` sets 0).
"""

from __future__ import annotations

import argparse
import asyncio
import asyncio.base_events
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

from liveroom.errors import StoreUnavailable
from liveroom.model import NewMessage
from liveroom.node import Node, build_node
from liveroom.settings import Settings, parse_tiers
from liveroom.snapshot import ABSENT_EPOCH
from liveroom.store.base import Pulled, PullRequest
from liveroom.store.memory import MemoryStore
from liveroom.store.memory import log as memory_log

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


class FaultyLog:
    """A node's view of the shared log: pulls yield, and may be delayed or fail."""

    def __init__(self, log: Any, rng: random.Random, faults: Faults) -> None:
        self._log = log
        self._rng = rng
        self._faults = faults

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
        await asyncio.sleep(0)
        return pulled


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
    filters: Any
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
        world.store.notifier.subscribe(self._notify, self._resync)

    @property
    def running(self) -> bool:
        return self.node is not None

    async def start(self) -> None:
        world = self.world
        view = StoreView(FaultyLog(world.store.log, world.rng, world.faults),
                         world.store.notifier, world.store.stats, world.store.operators,
                         world.store.counters, world.store.moderation,
                         world.store.filters)
        node = build_node(replace(world.settings, node_id=f"n{self.index}"), world.clock,
                          store=view)  # type: ignore[arg-type]
        await node.vip_list.start()
        await node.recvsvr.start()
        await node.statsvr.start()
        await node.proxy.start()
        self.generation += 1
        self.node = node

    async def stop(self) -> None:
        node, self.node = self.node, None
        if node is None:
            return
        await node.proxy.stop()
        await node.vip_list.stop()
        await node.recvsvr.stop()
        await node.statsvr.stop()

    def _notify(self, room: str, seq: int) -> None:
        rng, faults, loop = self.world.rng, self.world.faults, self.world.loop
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


@dataclass
class Truth:
    """What the store holds, as the publishers and faults saw it."""

    epochs: list[str] = field(default_factory=lambda: [ABSENT_EPOCH])
    """In the order they were made."""
    sent: dict[str, dict[int, bool]] = field(default_factory=dict)
    """Per epoch: seq -> important."""
    personal: dict[str, dict[int, str]] = field(default_factory=dict)
    """Per epoch: pseq -> addressee."""

    def epoch_seen(self, epoch: str, carried: str | None = None) -> None:
        """``epoch`` exists now; ``carried``: the epoch whose log it kept (a renewal)."""
        if epoch in self.epochs:
            return
        self.epochs.append(epoch)
        self.sent[epoch] = dict(self.sent.get(carried, {})) if carried else {}
        self.personal[epoch] = dict(self.personal.get(carried, {})) if carried else {}


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
                assert r.status == 503, (r.status, r.body)
                self.refused += 1
                await asyncio.sleep(rng.uniform(0.05, 0.5))
                continue
            body = json.loads(r.body)
            self.answers.append(Answer(loop.time(), self.node, self.cursor, body))
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
    store: MemoryStore
    clock: LoopClock
    timeout: int
    interval_max: float
    truth: Truth = field(default_factory=Truth)
    drawn: Faults = field(default_factory=Faults)
    """The faults as drawn (``faults`` is cleared for the quiet at the end)."""
    nodes: list[SimNode] = field(default_factory=list)
    listeners: list[SimListener] = field(default_factory=list)
    events: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        self.events.append(f"{self.loop.time():9.3f} {text}")


def draw_world(seed: int, loop: SimLoop) -> World:
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
    )
    timeout = rng.choice([2, 5])
    settings = Settings(store="memory", **TOKENS, poll_timeout=timeout,
                        tiers=parse_tiers("1:0.5,6:1" if tiered else "off"),
                        hold_tick=0.1, heartbeat_flush=0.2, merge_every=0.5,
                        first_pull_timeout=3.0, fallback_pull_interval=1.0)
    clock = LoopClock(loop)
    store = MemoryStore(settings.log_policy(), clock)
    world = World(seed, loop, rng, faults, settings, store, clock, timeout,
                  interval_max=1.0 if tiered else 0.0, drawn=faults)
    for i in range(rng.choice([1, 2, 3])):
        world.nodes.append(SimNode(world, i))
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
        appended = await world.store.log.append(ROOM, message)
        truth.epoch_seen(appended.epoch)
        if to is None:
            truth.sent[appended.epoch][appended.seq] = important
        else:
            truth.personal[appended.epoch][appended.seq] = to


async def strike(world: World, until: float) -> None:
    """The faults that are events: restarts, renewals, ends."""
    rng, loop, truth, faults = world.rng, world.loop, world.truth, world.faults
    events: list[tuple[float, str]] = []
    for kind, count in (("restart", faults.restarts), ("renew", faults.renewals),
                        ("end", faults.ends)):
        events += [(rng.uniform(1.0, until), kind) for _ in range(count)]
    for at, kind in sorted(events):
        await asyncio.sleep(max(0.0, at - loop.time()))
        if kind == "restart":
            sim = rng.choice(world.nodes)
            world.note(f"restart node {sim.index}")
            await sim.stop()
            await asyncio.sleep(rng.uniform(0.0, 1.0))
            await sim.start()
        elif kind == "renew":
            current = truth.epochs[-1]
            if current == ABSENT_EPOCH:
                continue
            epoch = await world.store.log.renew_epoch(ROOM, current)
            world.note(f"renew epoch {current} -> {epoch}")
            truth.epoch_seen(epoch, carried=current)
        else:
            ended = await world.store.operators.end_broadcast(
                ROOM, int(world.clock.time() * 1000), 86_400_000)
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
    end = world.loop.time() + seconds
    tasks = [asyncio.ensure_future(listener.run(end + quiet)) for listener in world.listeners]
    await asyncio.gather(publish(world, end), strike(world, end))
    world.faults = Faults()  # the quiet: every fault stops
    for sim in world.nodes:
        if sim.node is None:
            await sim.start()
    await asyncio.gather(*tasks)
    for sim in world.nodes:
        await sim.stop()
    await world.store.close()


# -- the checker ---------------------------------------------------------------------------


def check(world: World) -> list[str]:
    """Every broken promise, one line each (empty: all kept)."""
    truth = world.truth
    order = {epoch: i for i, epoch in enumerate(truth.epochs)}
    problems: list[str] = []
    for listener in world.listeners:
        problems += [f"{listener.uid}: {p}" for p in _check_listener(listener, truth, order)]
    return problems


def _check_listener(listener: SimListener, truth: Truth, order: dict[str, int]) -> list[str]:
    problems = list(listener.hung)
    seen: set[tuple[str, int]] = set()
    pseen: set[tuple[str, int]] = set()
    last_epoch = ABSENT_EPOCH
    for a in listener.answers:
        body, before = a.body, a.before
        epoch = body["epoch"]
        where = f"answer at {a.at:.3f} (node {a.node})"
        if epoch not in order:
            problems.append(f"{where}: unknown epoch {epoch}")
            continue
        if order[epoch] < order[last_epoch]:
            problems.append(f"{where}: went back from epoch {last_epoch} to {epoch}"
                            f"{' (reset)' if body.get('reset') else ''}")
        last_epoch = epoch if order[epoch] >= order[last_epoch] else last_epoch
        items = body["important"] + body["messages"]
        for m in items:
            key = (epoch, m["seq"])
            if key in seen:
                problems.append(f"{where}: seq {m['seq']} of epoch {epoch} again")
            seen.add(key)
            if truth.sent.get(epoch, {}).get(m["seq"]) != m["important"]:
                problems.append(f"{where}: seq {m['seq']} was not sent so in {epoch}")
        for m in body.get("personal", ()):
            if m["to"] != listener.uid:
                problems.append(f"{where}: personal pseq {m['pseq']} for {m['to']}")
            key = (epoch, m["pseq"])
            if key in pseen:
                problems.append(f"{where}: personal pseq {m['pseq']} again")
            pseen.add(key)
        # A listener that waited on the room from before it existed reads the
        # epoch it finds from its start; when that is a later broadcast than
        # the room's first, the ended ones' messages (gone with their
        # broadcast, as for a listener reset by the end) count in its gaps.
        later = (before is not None and before["epoch"] == ABSENT_EPOCH
                 and epoch not in (ABSENT_EPOCH, truth.epochs[1]))
        if body.get("igap") and not later:
            problems.append(f"{where}: igap {body['igap']} (important lost)")
        if body.get("pgap"):
            problems.append(f"{where}: pgap {body['pgap']} (personal lost)")
        if body.get("reset") or before is None:
            continue  # a first poll or a reset: a new stretch starts at its cursors
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
    # Liveness: once the faults stopped, everybody reached the head.
    final = truth.epochs[-1]
    if listener.answers and final != ABSENT_EPOCH:
        last = listener.answers[-1].body
        head = max(truth.sent.get(final, {}) or [0])
        if last["epoch"] != final or max(last["seq"], last["iseq"]) < head:
            problems.append(f"never caught up: last answer at {last['epoch']} "
                            f"{last['seq']}/{last['iseq']}, head {final} {head}")
    return problems


# -- running seeds --------------------------------------------------------------------------


@dataclass
class Outcome:
    seed: int
    problems: list[str]
    world: World
    callbacks: int


def run_seed(seed: int, *, seconds: float = 30.0,
             patch: Callable[[World], None] | None = None) -> Outcome:
    """Run one seed in a fresh loop; ``patch`` may change the drawn world."""
    random.seed(seed)  # anything the product draws from the module's generator
    rng = random.Random(seed)
    loop = SimLoop(rng)
    world = draw_world(seed, loop)
    if patch is not None:
        patch(world)
    asyncio.set_event_loop(loop)
    # Epochs are random names: drawn from the seed here, so a replay names
    # them alike (and signs the same contexts).
    made_up = memory_log.new_epoch
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    memory_log.new_epoch = lambda: "".join(rng.choice(alphabet) for _ in range(12))
    try:
        main: Coroutine[Any, Any, None] = simulate(world, seconds=seconds)
        loop.run_until_complete(main)
        problems = check(world)
    except Stalled as exc:
        problems = [f"stalled: {exc}"]
    finally:
        memory_log.new_epoch = made_up
        asyncio.set_event_loop(None)
        loop.close()
    return Outcome(seed, problems, world, loop.callbacks)


def replay_line(seed: int) -> str:
    return f"scripts/simulate --seed {seed} --verbose"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/simulate",
        description="Run the deterministic simulation of the listener path: one to three "
                    "nodes over the memory engine on a seeded scheduler with virtual time, "
                    "with faults (notifies lost or late, pulls late or failed, node "
                    "restarts, epoch renewals, ended broadcasts, listeners moving). Each "
                    "seed is one world; a failing seed prints the line that replays it.")
    parser.add_argument("--seed", type=int, help="run this one seed")
    parser.add_argument("--seeds", type=int, default=100,
                        help="how many seeds to run (from --first; default 100)")
    parser.add_argument("--first", type=int, default=0, help="the first seed (default 0)")
    parser.add_argument("--seconds", type=float, default=30.0,
                        help="virtual seconds of traffic and faults per seed (default 30)")
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
        outcome = run_seed(seed, seconds=args.seconds)
        if args.verbose:
            w = outcome.world
            print(f"seed {seed}: {len(w.nodes)} nodes, {len(w.listeners)} listeners, "
                  f"tiers {w.settings.tiers}, {w.drawn}; {outcome.callbacks} callbacks")
            for event in w.events:
                print(f"  {event}")
        if outcome.problems:
            failed.append(seed)
            print(f"seed {seed} FAILED ({len(outcome.problems)} problems); replay: "
                  f"{replay_line(seed)}")
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
