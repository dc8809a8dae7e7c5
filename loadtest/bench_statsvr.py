"""statsvr benchmark: heartbeat ingest, the merge of a million-member room, memory per member.

Three measurements, each printed with what it counts:

1. **Ingest.** Heartbeats taken per second by one statsvr node across its ingest
   boundary: msgpack ``[{room: [uid, ...]}, {room: [uid, ...]}]`` batches (the
   heartbeats, then the trusted ones: none here) packed by the proxy's
   batcher (``proxy.polls.heartbeats.Heartbeats``), unpacked and applied by
   ``Statsvr.ingest``. The load is one vip room (16 shards) of ``--members``
   listeners plus ``--rooms`` normal rooms, every member beating again and
   again (steady state: no joins). The proxy's packing is timed apart.
2. **Merge.** A vip room of ``--members`` members written by one node as 16
   shard keys to Redis, then merged by a fresh node (cold: the shard index;
   members are read for a small room's exact count only), then again after
   1 % churn, and ``/online`` pages (deep ones read one shard whole). A
   ticker task measures the event loop's lag meanwhile (how late a 5 ms
   sleep wakes).
3. **Memory.** ``tracemalloc`` around building the owner's table of the
   ``--members`` room, around a reading node's merge of it (the shard index:
   members are not read) and around a first ``/online`` page: bytes per
   member (uids are 16 characters).

    python loadtest/bench_statsvr.py                      # starts a redis-server
    python loadtest/bench_statsvr.py --redis-url redis://127.0.0.1:6379/15

Without ``--redis-url`` a throw-away ``redis-server`` is started on a free
loopback port (it must be on PATH). The given database is flushed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence

import msgpack

from liveroom.clock import SystemClock
from liveroom.store import LogPolicy, open_store
from proxy.polls.heartbeats import Heartbeats
from statsvr import StatsLimits, Statsvr
from statsvr.member_pages import KEEP_FOR

ROOM = "bench-vip"


def uid(i: int) -> str:
    return f"listener{i:08d}"  # 16 characters


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def redis_server(url: str | None) -> Iterator[str]:
    if url:
        yield url
        return
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server not found: install it or pass --redis-url")
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", tmp],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 10
            while True:
                with contextlib.suppress(OSError), socket.create_connection(
                        ("127.0.0.1", port), timeout=0.2):
                    break
                if time.monotonic() > deadline:
                    raise SystemExit("redis-server did not start")
                time.sleep(0.05)
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            proc.terminate()
            proc.wait(10)


class LagProbe:
    """Times the block it wraps (``elapsed``, seconds) and measures meanwhile how
    late the event loop wakes a task sleeping ``period`` seconds."""

    def __init__(self, period: float = 0.005) -> None:
        self.period = period
        self.lags: list[float] = []
        self.elapsed = 0.0
        self._task: asyncio.Task[None] | None = None
        self._start = 0.0

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            start = loop.time()
            await asyncio.sleep(self.period)
            self.lags.append(loop.time() - start - self.period)

    async def __aenter__(self) -> LagProbe:
        self._task = asyncio.create_task(self._run())
        await asyncio.sleep(0)
        self._start = time.perf_counter()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.elapsed = time.perf_counter() - self._start
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    def summary(self) -> str:
        if not self.lags:
            return "no samples"
        lags = sorted(self.lags)
        p99 = lags[min(len(lags) - 1, int(len(lags) * 0.99))]
        return (f"loop lag p50 {statistics.median(lags) * 1000:.1f} ms, "
                f"p99 {p99 * 1000:.1f} ms, max {lags[-1] * 1000:.1f} ms "
                f"({len(lags)} samples)")


def node(stats: object, name: str) -> Statsvr:
    return Statsvr(stats, SystemClock(), name,  # type: ignore[arg-type]
                   limits=StatsLimits(), is_vip=lambda room: room == ROOM)


async def bench_ingest(members: int, rooms: int, seconds: float) -> None:
    print(f"\n== ingest: one vip room of {members:,} + {rooms:,} rooms of 10 ==")
    clock = SystemClock()
    store = open_store("memory", LogPolicy(), clock)
    target = node(store.stats, "ingest")
    batches: list[bytes] = []

    class Capture:
        """Stands for a statsvr node in another process: a proxy packs each
        batch with msgpack for it (an in-process node takes the dict as is)."""

        def ingest(self, blob: bytes) -> int:
            batches.append(blob)
            return 0

        def take(self, batch: Mapping[str, Sequence[str]],
                 trusted: Mapping[str, Sequence[str]]) -> int:
            return self.ingest(msgpack.packb([batch, trusted]))

    hb = Heartbeats([Capture()], clock, max_batch=8192)
    t0 = time.perf_counter()
    total = 0
    for i in range(members):
        hb.beat(ROOM, uid(i))
        total += 1
        if i % 10 == 0 and rooms:
            r = (i // 10) % rooms
            hb.beat(f"room{r}", uid(i))
            total += 1
    hb.flush()
    pack_s = time.perf_counter() - t0
    print(f"proxy side (beat + pack): {total / pack_s:,.0f} heartbeats/s "
          f"({len(batches)} batches of up to 8192)")
    # First pass: everyone joins (the table grows).
    t0 = time.perf_counter()
    for blob in batches:
        target.ingest(blob)
    join_s = time.perf_counter() - t0
    print(f"first pass (all joins): {total / join_s:,.0f} heartbeats/s")
    # Steady state: the same members beat again and again.
    taken = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for blob in batches:
            taken += target.ingest(blob)
    steady_s = time.perf_counter() - t0
    print(f"steady state: {taken / steady_s:,.0f} heartbeats/s "
          f"({taken:,} in {steady_s:.1f} s, msgpack unpack included)")


@contextlib.asynccontextmanager
async def redis_stats(url: str) -> AsyncIterator[object]:
    store = open_store(url, LogPolicy(), SystemClock(), node_id="bench")
    await store.start()
    try:
        client = store._client  # type: ignore[attr-defined]
        await client.flushdb()
        yield store.stats
    finally:
        await store.close()


async def bench_merge(url: str, members: int) -> None:
    print(f"\n== merge: a vip room of {members:,} over 16 shard keys on redis ==")
    async with redis_stats(url) as stats:
        owner = node(stats, "owner")
        uids = [uid(i) for i in range(members)]
        for i in range(0, members, 50_000):
            owner.tables.beat(ROOM, uids[i:i + 50_000])
        async with LagProbe() as probe:
            await owner.write_once()
        took = probe.elapsed
        print(f"owner's first write of 16 shard keys: {took:.2f} s (sort, pack, one "
              f"pipeline, and the viewers history of {members:,} joins), {probe.summary()}")
        reader = node(stats, "reader")
        reader.merge.want(ROOM)
        async with LagProbe() as probe:
            await reader.merge.merge_now([ROOM])
        cold = probe.elapsed
        view = reader.merge.view(ROOM)
        assert view.online == members, view.online
        print(f"cold merge (the shard index): {cold * 1000:.0f} ms, {probe.summary()}")
        # 1 % churn: some leave, as many join.
        churn = members // 100
        for shard in owner.tables._rooms[ROOM].shards:
            for u in list(shard.members)[: churn // 16]:
                del shard.members[u]
            shard.dirty = True
        owner.tables.beat(ROOM, [f"newcomer{i:08d}" for i in range(churn)])
        async with LagProbe() as probe:
            await owner.write_once()
        took = probe.elapsed
        print(f"owner's write after 1 % churn (16 shards changed): {took * 1000:.0f} ms, "
              f"{probe.summary()}")
        async with LagProbe() as probe:
            await reader.merge.merge_now([ROOM])
        warm = probe.elapsed
        print(f"merge after 1 % churn: {warm * 1000:.0f} ms, {probe.summary()}")
        async with LagProbe() as probe:
            await reader.merge.merge_now([ROOM])
        same = probe.elapsed
        print(f"merge with nothing changed: {same * 1000:.1f} ms")
        view = reader.merge.view(ROOM)
        async with LagProbe() as probe:
            page = await view.page(members // 2, 1000)
        first_page = probe.elapsed
        t0 = time.perf_counter()
        await view.page(members // 3, 1000)
        later_page = time.perf_counter() - t0
        assert len(page) == 1000
        print(f"/online page at offset {members // 2:,}: first {first_page * 1000:.0f} ms "
              f"(reads and decodes one shard), then {later_page * 1000:.1f} ms (another "
              f"shard); {probe.summary()}")

        # Every member polls through a second node as well: each shard has two
        # contributors; a room this big is counted by their sizes, not read.
        twin = node(stats, "twin")
        for i in range(0, members, 50_000):
            twin.tables.beat(ROOM, uids[i:i + 50_000])
        await twin.write_once()
        async with LagProbe() as probe:
            await reader.merge.merge_now([ROOM])
        both = probe.elapsed
        print(f"merge when all members also poll a second node (32 keys, counted "
              f"from the index): {both * 1000:.0f} ms, {probe.summary()}")


def measure(build: object) -> tuple[int, object]:
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    value = build()  # type: ignore[operator]
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return after - before, value


async def bench_memory(members: int) -> None:
    print(f"\n== memory per online member ({members:,} members, 16-character uids) ==")
    clock = SystemClock()
    store = open_store("memory", LogPolicy(), clock)
    owner = node(store.stats, "mem")
    blobs = [msgpack.packb({ROOM: [uid(i) for i in range(j, min(j + 8192, members))]})
             for j in range(0, members, 8192)]

    def fill() -> None:
        for blob in blobs:
            owner.ingest(blob)

    table_bytes, _ = measure(fill)
    print(f"owner's table: {table_bytes / members:.0f} bytes/member "
          f"(uid strings, dict slots of 16 shards; ticks are shared ints)")
    writes, _ = await owner.tables.take_writes()
    # Measured, not assumed: the lists the table keeps of what it last wrote
    # (their uid strings are the table's own, counted above).
    kept_bytes = sum(sys.getsizeof(shard.written)
                     for shard in owner.tables._rooms[ROOM].shards)
    print(f"written lists kept for the next incremental write: "
          f"{kept_bytes / members:.1f} bytes/member (lists of pointers to the table's "
          f"strings, sys.getsizeof of each shard's list)")
    now_ms = int(clock.time() * 1000)
    await store.stats.write_shards("mem", writes, now_ms, 60_000)
    del writes
    reader = node(store.stats, "reader")
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    await reader.merge.merge_now([ROOM])
    gc.collect()
    view_bytes = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    view = reader.merge.view(ROOM)
    assert view.online == members, view.online
    print(f"merged view on a reading node: {view_bytes:,} bytes for the room "
          f"({view_bytes / members:.3f} bytes/member: the shard index only)")
    total = table_bytes + kept_bytes + view_bytes
    print(f"owner's table + merged view: {total / members:.0f} bytes/member")
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    await view.page(0, 10)
    gc.collect()
    decoded = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    print(f"after an /online page, the heads of one shard kept for {KEEP_FOR:.0f} s: "
          f"{decoded:,} bytes")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=1_000_000)
    parser.add_argument("--rooms", type=int, default=1000,
                        help="normal rooms beside the vip room in the ingest test")
    parser.add_argument("--seconds", type=float, default=5.0,
                        help="length of the steady-state ingest run")
    parser.add_argument("--redis-url", help="use this Redis (its database is flushed)")
    args = parser.parse_args()
    await bench_ingest(args.members, args.rooms, args.seconds)
    with redis_server(args.redis_url) as url:
        await bench_merge(url, args.members)
    await bench_memory(args.members)


if __name__ == "__main__":
    asyncio.run(main())
