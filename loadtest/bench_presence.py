"""Presence of one huge room: what one reading node pays to keep its online view.

N simulated statsvr nodes own a room's members (each uid owned by one node,
split into ``--shards`` shard keys per node, as a vip room is) and write them
to a real Redis Cluster through the store's own ``write_shards``. One real
reader (``statsvr.merge.Merge``, the code every node serving the room runs)
merges the room: once cold, then once per simulated second while
``--churn`` of the members (a fraction a minute) leave and as many new ones
join, each change rewriting its owner's shard as a statsvr node would.

Reported per row, for the reading node:

- **read/pass**: bytes Redis sent for one merge pass (``INFO stats``
  ``total_net_output_bytes`` of every master around the pass, less what the
  ``INFO`` calls themselves cost), cold and then the median over churn passes;
- **held**: bytes the reader keeps for the room (``tracemalloc`` around the
  cold merge and the first page), then after 50 pages at random offsets (deep
  pages read and keep a whole shard group, within the page cache's budget);
- **stale**: how old the merged count can be: the merge period (1 s) plus the
  median pass time; ``right`` says whether every pass's count was the true one;
- **page p99**: the first ``/online`` page (100 members) right after each
  pass, i.e. on a new view, and a page at a random offset
  (``OnlineView.page``, no HTTP).

    python loadtest/bench_presence.py --members 100000 --nodes 10
    python loadtest/bench_presence.py --grid         # 100 k, 1 M, 5 M x 10, 100 nodes

Without ``--redis-url`` a throw-away Redis Cluster of 3 masters and 3 replicas
is started on free loopback ports (``redis-server`` on PATH); the given
cluster is flushed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import random
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import msgpack
import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from kit.provenance import commit, invocation, versions
from redis_cluster import LocalCluster

from liveroom.clock import SystemClock
from liveroom.store import LogPolicy, open_store
from liveroom.store.base import ShardWrite, StatsStore
from statsvr.merge import Merge
from statsvr.table import shard_of

ROOM = "huge"
TTL_MS = 120_000
PAGE = 100
RANDOM_PAGES = 50
GRID = [(100_000, 10), (100_000, 100), (1_000_000, 10), (1_000_000, 100),
        (5_000_000, 10), (5_000_000, 100)]


def uid(i: int) -> str:
    return f"listener{i:08d}"  # 16 characters, as the other benchmarks


@dataclass
class SimNode:
    """One simulated statsvr node: its members of the room, by shard."""

    name: str
    shards: list[set[str]]
    serial: int = 0
    dirty: set[int] = field(default_factory=set)

    def writes(self, indexes: Iterable[int]) -> list[ShardWrite]:
        out = []
        for index in indexes:
            members = sorted(self.shards[index])
            self.serial += 1
            out.append(ShardWrite(ROOM, index, len(self.shards), f"{self.name}.{self.serial}",
                                  len(members), msgpack.packb(members) if members else None))
        return out


@dataclass
class Row:
    members: int
    nodes: int
    cold_bytes: int = 0
    cold_s: float = 0.0
    pass_bytes: list[int] = field(default_factory=list)
    pass_s: list[float] = field(default_factory=list)
    held: int = 0
    held_deep: int = 0
    exact: bool = True
    first_page_ms: list[float] = field(default_factory=list)
    page_ms: list[float] = field(default_factory=list)


class OutBytes:
    """Bytes every master of the cluster has sent, less the cost of asking."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.clients = [redis.Redis(port=p) for p in cluster.masters()]
        self.cost = 0
        a = self.total()
        b = self.total()
        self.cost = b - a

    def total(self) -> int:
        return sum(int(c.info("stats")["total_net_output_bytes"]) for c in self.clients) \
            - self.cost

    def flush(self) -> None:
        for client in self.clients:
            client.flushall()


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


async def write_all(stats: StatsStore, nodes: list[SimNode]) -> None:
    now_ms = int(time.time() * 1000)
    for sim in nodes:
        await stats.write_shards(sim.name, sim.writes(range(len(sim.shards))), now_ms, TTL_MS)


async def churn(stats: StatsStore, nodes: list[SimNode], members: list[str],
                changes: int, next_id: int, rng: random.Random) -> int:
    """``changes`` members leave and as many new ones join; every shard that
    changed is written again by its node. Returns the next unused id."""
    for _ in range(changes):
        at = rng.randrange(len(members))
        gone = members[at]
        owner = nodes[int(gone[8:]) % len(nodes)]
        owner.shards[shard_of(gone, len(owner.shards))].discard(gone)
        owner.dirty.add(shard_of(gone, len(owner.shards)))
        new = uid(next_id)
        next_id += 1
        members[at] = new
        sim = nodes[int(new[8:]) % len(nodes)]
        sim.shards[shard_of(new, len(sim.shards))].add(new)
        sim.dirty.add(shard_of(new, len(sim.shards)))
    now_ms = int(time.time() * 1000)
    for sim in nodes:
        if sim.dirty:
            await stats.write_shards(sim.name, sim.writes(sorted(sim.dirty)), now_ms, TTL_MS)
            sim.dirty.clear()
    return next_id


async def run_row(url: str, out: OutBytes, members_n: int, nodes_n: int, shards: int,
                  passes: int, churn_per_minute: float, seed: int) -> Row:
    row = Row(members_n, nodes_n)
    out.flush()
    store = open_store(url, LogPolicy(), SystemClock(), node_id="reader")
    await store.start()
    try:
        members = [uid(i) for i in range(members_n)]
        nodes = [SimNode(f"sim{n:03d}", [set() for _ in range(shards)]) for n in range(nodes_n)]
        for i, member in enumerate(members):
            sim = nodes[i % nodes_n]
            sim.shards[shard_of(member, shards)].add(member)
        await write_all(store.stats, nodes)
        merge = Merge(store.stats, SystemClock(), merge_every=1.0)
        await asyncio.sleep(0.3)  # replication and the writes' answers settle
        gc.collect()
        tracemalloc.start()
        before_mem = tracemalloc.get_traced_memory()[0]
        before = out.total()
        start = time.perf_counter()
        await merge.merge_now([ROOM])
        row.cold_s = time.perf_counter() - start
        row.cold_bytes = out.total() - before
        view = merge.view(ROOM)
        await view.page(0, PAGE)
        gc.collect()
        row.held = tracemalloc.get_traced_memory()[0] - before_mem
        tracemalloc.stop()
        row.exact = view.online == members_n
        rng = random.Random(seed)
        changes = max(1, round(members_n * churn_per_minute / 60))
        next_id = members_n
        for _ in range(passes):
            next_id = await churn(store.stats, nodes, members, changes, next_id, rng)
            await asyncio.sleep(0.05)
            before = out.total()
            start = time.perf_counter()
            await merge.merge_now([ROOM])
            row.pass_s.append(time.perf_counter() - start)
            row.pass_bytes.append(out.total() - before)
            view = merge.view(ROOM)
            row.exact = row.exact and view.online == members_n
            start = time.perf_counter()
            await view.page(0, PAGE)
            row.first_page_ms.append((time.perf_counter() - start) * 1000)
        gc.collect()
        tracemalloc.start()
        before_mem = tracemalloc.get_traced_memory()[0]
        for _ in range(RANDOM_PAGES):
            start = time.perf_counter()
            await merge.view(ROOM).page(rng.randrange(0, max(1, members_n - PAGE)), PAGE)
            row.page_ms.append((time.perf_counter() - start) * 1000)
        gc.collect()
        row.held_deep = row.held + tracemalloc.get_traced_memory()[0] - before_mem
        tracemalloc.stop()
    finally:
        await store.close()
    return row


def mb(n: float) -> str:
    return f"{n / 1e6:.2f} MB" if n >= 1e5 else f"{n / 1e3:.1f} kB"


def show(row: Row, every: float) -> str:
    read = statistics.median(row.pass_bytes) if row.pass_bytes else 0
    stale = every + (statistics.median(row.pass_s) if row.pass_s else row.cold_s)
    first = p99(row.first_page_ms) if row.first_page_ms else 0.0
    return (f"| {row.members:,} | {row.nodes} | {mb(row.cold_bytes)} in {row.cold_s:.2f} s | "
            f"{mb(read)} | {mb(row.held)} / {mb(row.held_deep)} | {stale:.2f} s, "
            f"{'right' if row.exact else 'WRONG'} | "
            f"{first:.1f} ms / {p99(row.page_ms):.1f} ms |")


async def main_async(args: argparse.Namespace) -> None:
    rows = GRID if args.grid else [(args.members, args.nodes)]
    with contextlib.ExitStack() as stack:
        if args.redis_url:
            url = args.redis_url
            cluster = LocalCluster(Path(tempfile.mkdtemp()), ports=[
                int(part.rsplit(":", 1)[1]) for part in url.split("://", 1)[1].split(",")])
        else:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            cluster = LocalCluster(tmp / "cluster")
            print("starting a Redis Cluster (3 masters, 3 replicas)...", flush=True)
            cluster.start()
            stack.callback(cluster.stop)
            url = cluster.url
        out = OutBytes(cluster)
        print(f"command: {invocation('loadtest/bench_presence.py', None)}")
        print(f"commit {commit()}, {versions()}, {time.strftime('%Y-%m-%d')}")
        print(f"{args.shards} shards per node, {args.churn:.1%} of members changing a "
              f"minute, {args.passes} churn passes of 1 simulated second\n")
        print("| members | nodes | cold merge: read | read/pass | held: first page / "
              f"{RANDOM_PAGES} random pages | count stale | page p99: first on a new view / "
              "random |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for members_n, nodes_n in rows:
            row = await run_row(url, out, members_n, nodes_n, args.shards, args.passes,
                                args.churn, args.seed)
            print(show(row, 1.0), flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--members", type=int, default=100_000, help="members of the room")
    parser.add_argument("--nodes", type=int, default=10, help="simulated statsvr nodes")
    parser.add_argument("--shards", type=int, default=16,
                        help="shard keys per node (a vip room's --vip-shards)")
    parser.add_argument("--churn", type=float, default=0.01,
                        help="fraction of the members leaving (and as many joining) a minute")
    parser.add_argument("--passes", type=int, default=5, help="churn passes after the cold one")
    parser.add_argument("--grid", action="store_true",
                        help="every row: 100 k, 1 M and 5 M members x 10 and 100 nodes")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--redis-url", help="a redis+cluster:// URL to use (it is flushed)")
    args = parser.parse_args(argv)
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
