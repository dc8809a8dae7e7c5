"""The redis engine on a real Redis Cluster: nodes as one system, notifies per
room, durable appends, a slot moved and a master killed under traffic, a
room's counters across masters and a moved slot.

The store contract suites run on the cluster too (see ``CLUSTER_SUITES`` in
``conftest.py``); this file holds what only a cluster does.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace

import aiohttp
import pytest
import redis
from conftest import TEST_POLICY, hearing, opened
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot
from redis_cluster import LocalCluster
from support import Listener, PollRefused, send, serve, vip_rooms

from liveroom.clock import FakeClock
from liveroom.errors import StoreUnavailable
from liveroom.model import NewMessage
from liveroom.store import PullRequest
from liveroom.store.base import GiftRank, Ranking
from liveroom.store.redis import keys
from liveroom.store.redis import log as redis_log

pytestmark = pytest.mark.timeout(120)

DURABLE = replace(TEST_POLICY, durable_replicas=1, durable_timeout_ms=300)


def message(clock: FakeClock, body: str, cmid: str | None = None) -> NewMessage:
    return NewMessage(uid="u", body=body, important=False, ts=int(clock.time() * 1000),
                      client_msg_id=cmid)


async def test_two_serve_processes_over_the_cluster_act_as_one(cluster_url: str) -> None:
    with serve("--store", cluster_url, "--node-id", "a") as (a, _), \
            serve("--store", cluster_url, "--node-id", "b") as (b, _):
        async with aiohttp.ClientSession() as session:
            rooms = [f"two-{i}" for i in range(3)]  # on different masters, most likely
            listeners = [Listener(session, room) for room in rooms]
            for listener in listeners:
                await listener.poll(a)
            for i in range(12):
                room = rooms[i % 3]
                await send(session, (a, b)[i % 2], room, i, important=i % 4 == 0)
            for n, listener in enumerate(listeners):
                async with asyncio.timeout(20):
                    while len(listener.received) < 4:
                        await listener.poll((a, b)[len(listener.answers) % 2], timeout=2)
                assert [m["body"] for m in listener.received] == \
                    sorted(listener.bodies(), key=lambda body: (body % 4 != 0, body))
                assert sorted(listener.bodies()) == list(range(n, 12, 3))
                assert not any(answer["reset"] for answer in listener.answers)


async def test_a_node_hears_only_the_rooms_it_reads(
        cluster_url: str, fake_clock: FakeClock) -> None:
    heard: list[tuple[str, int]] = []
    async with opened(cluster_url, TEST_POLICY, fake_clock) as reader, \
            opened(cluster_url, TEST_POLICY, fake_clock) as writer:
        reader.notifier.subscribe(lambda room, seq: heard.append((room, seq)),
                                  lambda rooms=None: None)
        await hearing(reader, "read")
        assert not reader.notifier.hears("unread")
        await writer.log.append("unread", message(fake_clock, "x"))
        await writer.log.append("read", message(fake_clock, "y"))
        async with asyncio.timeout(5):
            while ("read", 1) not in heard:
                await asyncio.sleep(0.01)
        reader.notifier.unwatch("read")
        assert not reader.notifier.hears("read")
        await writer.log.append("read", message(fake_clock, "z"))
        # The notify of seq 2 travels through the same shard as a probe would:
        # a later append to a watched room in that slot range proves it passed.
        await hearing(reader, "again")
        await writer.log.append("again", message(fake_clock, "w"))
        async with asyncio.timeout(5):
            while ("again", 1) not in heard:
                await asyncio.sleep(0.01)
    assert heard == [("read", 1), ("again", 1)]


async def test_a_durable_append_is_acknowledged_once_a_replica_holds_it(
        cluster_url: str, redis_cluster: LocalCluster, fake_clock: FakeClock) -> None:
    async with opened(cluster_url, DURABLE, fake_clock) as store:
        first = await store.log.append("d", message(fake_clock, "a", "c1"))
        assert (first.seq, first.duplicate) == (1, False)
        master = redis_cluster.master_of(keys.meta("d"))
        replica = redis_cluster.replica_of(master)
        redis_cluster.kill(replica)
        try:
            # Stored on the master, but no replica acknowledged it: not acknowledged.
            with pytest.raises(StoreUnavailable, match="0 of 1 replicas"):
                await store.log.append("d", message(fake_clock, "b", "c2"))
        finally:
            redis_cluster.start_node(replica)
        redis_cluster.wait_healthy()
        # The sender retries with its client_msg_id until the replica, back and
        # synced, acknowledges: answered its seq, stored once.
        async with asyncio.timeout(10):
            while True:
                try:
                    again = await store.log.append("d", message(fake_clock, "b", "c2"))
                    break
                except StoreUnavailable:
                    await asyncio.sleep(0.05)
        assert (again.seq, again.duplicate) == (2, True)
        (pulled,) = await store.log.pull([PullRequest("d", 0, 10)])
        assert [e.body for e in pulled.entries] == ["a", "b"]
        assert [e.body for e in pulled.entries] == ["a", "b"]


def replica_listed(master: int, replica: int) -> bool:
    """Whether the master's CLUSTER SLOTS lists ``replica`` for its slots."""
    with redis.Redis(port=master, socket_timeout=2) as client:
        layout = client.execute_command("CLUSTER", "SLOTS")
    return any(int(node[1]) == replica for entry in layout for node in entry[3:])


def read_calls(port: int) -> int:
    """Read commands a cluster node served, scripts' included."""
    with redis.Redis(port=port, socket_timeout=2) as client:
        stats = client.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0))
               for name in ("xrange", "xrevrange", "hmget", "hget", "hgetall", "exists",
                            "xlen", "get"))


async def test_durable_nodes_read_pulls_from_replicas(
        cluster_url: str, redis_cluster: LocalCluster, fake_clock: FakeClock,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With --durable-replicas, a pull reads a replica (no listener sees a
    message a failover could take back, and the reads leave the master), even
    when the node mapped the slots before the replica was listed; without,
    the master."""
    room = "replicated"
    master = redis_cluster.master_of(keys.meta(room))
    replica = redis_cluster.replica_of(master)
    async with opened(cluster_url, DURABLE, fake_clock) as store:
        await store.log.append(room, message(fake_clock, "x", None))
    # Redis 7.0 leaves a replica out of CLUSTER SLOTS until the master has
    # heard of its replication offset (a fresh cluster): a client mapping
    # the slots before reads the master until its map is refreshed.
    async with asyncio.timeout(10):
        while not replica_listed(master, replica):
            await asyncio.sleep(0.05)
    for policy, reads_on in ((DURABLE, replica), (TEST_POLICY, master)):
        async with opened(cluster_url, policy, fake_clock) as store:
            other = master if reads_on == replica else replica
            if policy is DURABLE:
                # As a reader that mapped the slots before the replica was
                # listed sees them: a map of masters alone. The pulls map again.
                await store.log.pull([PullRequest(room, 0, 10)])
                reader = store.log._reader
                assert isinstance(reader, RedisCluster)
                for nodes in reader.nodes_manager.slots_cache.values():
                    del nodes[1:]
                monkeypatch.setattr(redis_log, "REMAP_EVERY", 0.0)
            before = read_calls(reads_on), read_calls(other)
            for _ in range(20):
                (pulled,) = await store.log.pull([PullRequest(room, 0, 10)])
                assert pulled.epoch is not None
            after = read_calls(reads_on), read_calls(other)
            assert after[0] - before[0] >= 20, (policy.durable_replicas, before, after)
            assert after[1] - before[1] < 5, (policy.durable_replicas, before, after)


async def test_on_one_redis_without_replicas_a_durable_append_is_never_acknowledged(
        redis_url: str, fake_clock: FakeClock) -> None:
    async with opened(redis_url, DURABLE, fake_clock) as store:
        for _ in range(2):  # a retry with its client_msg_id is refused alike
            with pytest.raises(StoreUnavailable, match="0 of 1 replicas"):
                await store.log.append("d", message(fake_clock, "a", "c1"))
        (pulled,) = await store.log.pull([PullRequest("d", 0, 10)])
        assert [e.body for e in pulled.entries] == ["a"]  # stored once, unacknowledged


async def test_the_whitelist_of_before_the_hash_tag_is_moved_at_start(
        redis_url: str, fake_clock: FakeClock) -> None:
    with redis.Redis.from_url(redis_url) as client:
        client.sadd(keys.VIP_BEFORE, "big", "bigger")
    async with opened(redis_url, TEST_POLICY, fake_clock) as store:
        assert await vip_rooms(store) == {"big", "bigger"}
    with redis.Redis.from_url(redis_url) as client:
        assert not client.exists(keys.VIP_BEFORE)


def test_serve_refuses_durable_replicas_on_the_memory_engine() -> None:
    done = subprocess.run([sys.executable, "-m", "liveroom", "serve", "--durable-replicas", "1"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert "--durable-replicas" in done.stderr
    assert "memory engine has no replicas" in done.stderr


def test_serve_refuses_a_malformed_cluster_url() -> None:
    done = subprocess.run([sys.executable, "-m", "liveroom", "serve", "--store",
                           "redis+cluster://127.0.0.1:7000,nohost", "--auth", "open",
                           "--admin-token", "a" * 32, "--publisher-token", "p" * 32,
                           "--secret", "s" * 32],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert "bad cluster node 'nohost'" in done.stderr
    assert "Traceback" not in done.stderr


# --- under traffic -------------------------------------------------------------


@dataclass
class Traffic:
    """Publishers and long-poll listeners of one room over real sockets,
    through several nodes; every send retried with its client_msg_id until
    acknowledged."""

    nodes: list[str]
    room: str
    acknowledged: dict[str, int] = field(default_factory=dict)
    """Body -> the seq its 201 answered."""
    accepted: list[tuple[float, float]] = field(default_factory=list)
    """When each acknowledged send's last attempt started, and when its 201 came."""
    refused: int = 0
    poll_refusals: int = 0
    """Polls answered 503 or cut while the store failed over."""
    listeners: list[Listener] = field(default_factory=list)

    async def publish(self, session: aiohttp.ClientSession, name: str, count: int,
                      pace: float) -> None:
        for i in range(count):
            body = f"{name}-{i}"
            attempt = 0
            while True:
                url = self.nodes[(i + attempt) % len(self.nodes)]
                attempt += 1
                started = time.monotonic()
                try:
                    async with session.post(
                            f"{url}/v1/rooms/{self.room}/messages",
                            json={"uid": name, "body": body, "client_msg_id": body},
                            timeout=aiohttp.ClientTimeout(total=5)) as resp:
                        if resp.status == 201:
                            self.acknowledged[body] = (await resp.json())["seq"]
                            self.accepted.append((started, time.monotonic()))
                            break
                        assert resp.status == 503, await resp.text()
                        self.refused += 1
                except (aiohttp.ClientError, TimeoutError):
                    self.refused += 1
                await asyncio.sleep(0.05)
            await asyncio.sleep(pace)

    async def start_listening(self, stop: asyncio.Event) -> list[asyncio.Task[None]]:
        """First polls (answered at once), then each listener polls until ``stop``."""
        for listener in self.listeners:
            await listener.poll(self.nodes[0])
        return [asyncio.create_task(self.listen(lst, stop)) for lst in self.listeners]

    async def listen(self, listener: Listener, stop: asyncio.Event) -> None:
        turn = 0
        while not stop.is_set():
            turn += 1
            try:
                await listener.poll(self.nodes[turn % len(self.nodes)], timeout=1)
            except PollRefused as refused:
                # A 503 (with Retry-After) while the store fails over; any
                # other refusal is a failure of the test.
                if refused.status != 503:
                    raise
                self.poll_refusals += 1
                await asyncio.sleep(0.05)
            except (aiohttp.ClientError, TimeoutError):
                self.poll_refusals += 1
                await asyncio.sleep(0.05)


@asynccontextmanager
async def two_nodes(url: str, *args: str) -> AsyncIterator[list[str]]:
    with serve("--store", url, "--node-id", "a", *args) as (a, _), \
            serve("--store", url, "--node-id", "b", *args) as (b, _):
        yield [a, b]


def check_caught_up(traffic: Traffic) -> None:
    """Every acknowledged message reached every listener once, in seq order."""
    for listener in traffic.listeners:
        seqs = [m["seq"] for m in listener.received]
        assert seqs == sorted(set(seqs)), "out of order or duplicated"
        got = {m["body"]: m["seq"] for m in listener.received}
        lost = {b: s for b, s in traffic.acknowledged.items() if got.get(b) != s}
        assert not lost, f"acknowledged but not received: {lost}"
        assert not any(answer["gap"] for answer in listener.answers)


async def test_a_master_killed_under_traffic_loses_no_acknowledged_message(
        cluster_url: str, redis_cluster: LocalCluster) -> None:
    room = "failover"
    async with two_nodes(cluster_url, "--durable-replicas", "1",
                         "--durable-timeout", "0.5") as nodes, \
            aiohttp.ClientSession() as session:
        traffic = Traffic(nodes, room)
        traffic.listeners = [Listener(session, room, uid=f"l{i}") for i in range(4)]
        stop = asyncio.Event()
        listening = await traffic.start_listening(stop)
        publishing = [asyncio.create_task(traffic.publish(session, f"p{k}", 80, 0.04))
                      for k in range(2)]
        async with asyncio.timeout(30):
            while len(traffic.acknowledged) < 30:
                await asyncio.sleep(0.01)
        master = redis_cluster.master_of(keys.meta(room))
        redis_cluster.kill(master)
        killed_at = time.monotonic()
        try:
            # A supervisor restarts the dead node once its replica took over; it
            # rejoins as the new master's replica, and durable sends pass again.
            async with asyncio.timeout(30):
                while redis_cluster.master_of(keys.meta(room)) == master:
                    await asyncio.sleep(0.05)
            took_over = time.monotonic() - killed_at
        finally:
            # Even when the failover failed: no later test waits on a dead node.
            await asyncio.to_thread(redis_cluster.revive)
        async with asyncio.timeout(60):
            await asyncio.gather(*publishing)
        # The first send begun after the kill and accepted (one in flight at the
        # kill may have been acknowledged before the master died).
        back = min(done for started, done in traffic.accepted if started > killed_at) \
            - killed_at
        print(f"\nfailover: replica took over {took_over:.1f} s after the kill, first "
              f"accepted send {back:.1f} s after it; {traffic.refused} sends refused "
              f"and retried; {len(traffic.acknowledged)} acknowledged")
        head = max(traffic.acknowledged.values())
        async with asyncio.timeout(30):
            while any(lst.seq is None or lst.seq < head for lst in traffic.listeners):
                await asyncio.sleep(0.05)
        stop.set()
        await asyncio.gather(*listening)
    assert len(traffic.acknowledged) == 160
    assert sorted(traffic.acknowledged.values()) == list(range(1, 161))  # none twice
    check_caught_up(traffic)
    assert back <= 10.0


async def test_a_slot_moved_under_traffic_loses_nothing(
        cluster_url: str, redis_cluster: LocalCluster) -> None:
    room = "resharded"
    slot = key_slot(keys.meta(room).encode())
    async with two_nodes(cluster_url) as nodes, aiohttp.ClientSession() as session:
        traffic = Traffic(nodes, room)
        traffic.listeners = [Listener(session, room, uid=f"l{i}") for i in range(2)]
        stop = asyncio.Event()
        listening = await traffic.start_listening(stop)
        publishing = asyncio.create_task(traffic.publish(session, "p", 60, 0.02))
        async with asyncio.timeout(30):
            while len(traffic.acknowledged) < 15:
                await asyncio.sleep(0.01)
        source = redis_cluster.master_of(keys.meta(room))
        target = next(p for p in redis_cluster.masters() if p != source)
        await asyncio.to_thread(redis_cluster.move_slot, slot, target)
        assert redis_cluster.master_of(keys.meta(room)) == target
        async with asyncio.timeout(60):
            await publishing
        head = max(traffic.acknowledged.values())
        async with asyncio.timeout(30):
            while any(lst.seq is None or lst.seq < head for lst in traffic.listeners):
                await asyncio.sleep(0.05)
        # Notifies follow the room to its new master: a send now is heard at
        # once. One send heard within a second could be the fallback pull (once a
        # second, at any phase); five sends at spread phases each heard within
        # 0.4 s are a notify (by the fallback alone: 0.4^5, 1 %).
        heard_in = []
        for i in range(5):
            started = time.monotonic()
            await send(session, nodes[0], room, f"after-{i}")
            async with asyncio.timeout(10):
                while not any(m["body"] == f"after-{i}"
                              for m in traffic.listeners[0].received):
                    await asyncio.sleep(0.01)
            heard_in.append(time.monotonic() - started)
            await asyncio.sleep(0.23 * (i + 1) % 1)  # another phase of the fallback
        stop.set()
        await asyncio.gather(*listening)
    assert sorted(traffic.acknowledged.values()) == list(range(1, 61))
    check_caught_up(traffic)
    assert max(heard_in) < 0.4, f"heard after {heard_in} s: by the fallback pull, not a notify"



async def test_likes_and_gifts_span_every_master_and_follow_a_moved_slot(
        cluster_url: str, redis_cluster: LocalCluster) -> None:
    clock = FakeClock()
    rooms = [f"room{i}" for i in range(30)]
    assert {redis_cluster.master_of(keys.likes(room)) for room in rooms} == set(
        redis_cluster.masters())
    async with opened(cluster_url, TEST_POLICY, clock) as store:
        counters = store.counters
        t = int(clock.time() * 1000)
        # One flush: one pipeline, a batch to each master in parallel.
        await counters.add_likes(dict.fromkeys(rooms, 3), t)
        await counters.add_gift("room0", "u", 5, "rose", t)
        slot = key_slot(keys.likes("room0").encode())
        source = redis_cluster.master_of(keys.likes("room0"))
        target = next(p for p in redis_cluster.masters() if p != source)
        await asyncio.to_thread(redis_cluster.move_slot, slot, target)
        assert redis_cluster.master_of(keys.gifts("room0")) == target
        await counters.add_likes(dict.fromkeys(rooms, 2), t + 60_000)
        assert await counters.add_gift("room0", "v", 7, "rose", t) == GiftRank(1, 7, 12)
        assert await counters.likes(rooms) == dict.fromkeys(rooms, 5)
        assert await counters.ranking("room0", 5) == Ranking(
            (("v", 7), ("u", 5)), 12, 2)
        minute = t // 60_000 * 60
        assert await counters.read_likes("room0", 60, 0, 2**40) == [
            (minute, 3), (minute + 60, 2)]
