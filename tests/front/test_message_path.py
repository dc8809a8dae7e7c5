"""The message path end to end over real HTTP, on both engines."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import aiohttp
from support import ADMIN_HEADERS, Listener, running_node, send

from liveroom.clock import FakeClock
from recvsvr.cache import ABSENT_RECHECK


async def test_a_listener_receives_every_message_once_in_order(engine_url: str,
                                                               session: Any) -> None:
    async with running_node(engine_url) as node:
        listener = Listener(session, "room1")
        first = await listener.poll(node.url)
        assert first["messages"] == []
        assert first["seq"] == 0
        assert first["reset"] is False

        async def sender() -> None:
            for i in range(60):
                await send(session, node.url, "room1", {"n": i}, important=i % 7 == 0)
                if i % 10 == 0:
                    await asyncio.sleep(0.01)  # let the listener hold between bursts

        task = asyncio.create_task(sender())
        await listener.poll_until(node.url, 60)
        await task
        seqs = [m["seq"] for m in listener.received]
        assert sorted(seqs) == list(range(1, 61))  # each exactly once
        assert len(set(seqs)) == 60
        for answer in listener.answers[1:]:
            got = answer["important"] + answer["messages"]
            assert [m["seq"] for m in answer["important"]] == sorted(
                m["seq"] for m in answer["important"])
            assert [m["seq"] for m in answer["messages"]] == sorted(
                m["seq"] for m in answer["messages"])
            assert all(m["important"] for m in answer["important"])
            assert not any(m["important"] for m in answer["messages"])
            assert answer["gap"] == answer["igap"] == 0, got
        assert {m["body"]["n"] for m in listener.received} == set(range(60))


async def test_important_messages_come_first(engine_url: str, session: Any) -> None:
    async with running_node(engine_url) as node:
        listener = Listener(session, "room1")
        await listener.poll(node.url)
        for i in range(3):
            await send(session, node.url, "room1", f"chat {i}")
        await send(session, node.url, "room1", "co-host joined", important=True)
        await node.node.recvsvr.wait_pulled("room1")  # the node has seen all four
        answer = await listener.poll(node.url)
        raw = await (await session.get(
            f"{node.url}/v1/rooms/room1/poll",
            params={"uid": "x", "epoch": answer["epoch"], "seq": 0, "iseq": 0})).text()
        assert raw.index('"important":[') < raw.index('"messages":[')
        assert [m["body"] for m in answer["important"]] == ["co-host joined"]
        assert [m["body"] for m in answer["messages"]] == ["chat 0", "chat 1", "chat 2"]
        assert (answer["seq"], answer["iseq"]) == (4, 4)


async def test_a_burst_of_2500_gives_an_exact_gap_and_keeps_important(engine_url: str,
                                                                      session: Any) -> None:
    async with running_node(engine_url, log_cap=3000) as node:
        listener = Listener(session, "burst")
        await listener.poll(node.url)
        connector_limit = asyncio.Semaphore(50)

        async def one(i: int) -> None:
            async with connector_limit:
                await send(session, node.url, "burst", i)

        await asyncio.gather(*(one(i) for i in range(1250)))
        for i in range(3):
            await send(session, node.url, "burst", f"gift {i}", important=True)
        await asyncio.gather(*(one(i) for i in range(1250, 2500)))
        await node.node.recvsvr.wait_pulled("burst")
        answer = await listener.poll(node.url)
        assert [m["body"] for m in answer["important"]] == ["gift 0", "gift 1", "gift 2"]
        assert len(answer["messages"]) == 500
        # The newest 500 are sent; the 2000 before them are counted.
        assert answer["messages"][-1]["seq"] == 2503
        assert answer["gap"] == 2000
        assert answer["igap"] == 0
        assert (answer["seq"], answer["iseq"]) == (2503, 2503)
        # Nothing is counted twice: the next poll has nothing pending.
        nothing = await listener.poll(node.url, timeout=1)
        assert (nothing["gap"], nothing["messages"], nothing["important"]) == (0, [], [])


async def test_a_repeated_client_msg_id_stores_one_message(engine_url: str,
                                                           session: Any) -> None:
    async with running_node(engine_url) as node:
        first = await send(session, node.url, "r", "hello", client_msg_id="abc-1")
        again = await send(session, node.url, "r", "hello", client_msg_id="abc-1")
        other = await send(session, node.url, "r", "hello", client_msg_id="abc-2")
        assert again == first
        assert other["seq"] == first["seq"] + 1
        listener = Listener(session, "r")
        answer = await listener.poll(node.url)
        assert [m["seq"] for m in answer["messages"]] == [1, 2]


async def test_the_fallback_pull_delivers_without_notifies(session: Any) -> None:
    clock = FakeClock()
    async with running_node("memory", clock) as node:
        await send(session, node.url, "quiet", "first")
        listener = Listener(session, "quiet")
        await listener.poll(node.url)
        absent = Listener(session, "unborn")  # a room that does not exist yet
        await absent.poll(node.url)
        node.node.store.notifier._subscribers.clear()  # the notify channel is lost
        held = asyncio.create_task(listener.poll(node.url, timeout=20))
        held_absent = asyncio.create_task(absent.poll(node.url, timeout=20))
        async with asyncio.timeout(5):
            while node.node.proxy.held_polls() < 2:
                await asyncio.sleep(0.01)
        await send(session, node.url, "quiet", "still here")
        await send(session, node.url, "unborn", "born")
        await asyncio.sleep(0.2)
        assert not held.done()  # no notify: nothing pulled yet
        await clock.advance(1.0)  # the fallback pull's second passes
        answer = await asyncio.wait_for(held, 5)
        assert [m["body"] for m in answer["messages"]] == ["still here"]
        # A room known to be absent is rechecked every ABSENT_RECHECK seconds.
        await asyncio.sleep(0.2)
        assert not held_absent.done()
        await clock.advance(ABSENT_RECHECK)
        answer = await asyncio.wait_for(held_absent, 5)
        assert [m["body"] for m in answer["messages"]] == ["born"]


async def test_1000_held_polls_are_answered_by_one_message(engine_url: str) -> None:
    connector = aiohttp.TCPConnector(limit=1200)
    async with aiohttp.ClientSession(connector=connector) as session, \
            running_node(engine_url) as node:
        # The room exists from its first send: polls of a room that does not
        # exist count nobody online.
        await send(session, node.url, "big", "welcome")
        listeners = [Listener(session, "big", uid=f"u{i}") for i in range(1000)]
        await asyncio.gather(*(lst.poll(node.url) for lst in listeners))
        # Every join shows in the merged online view (within 5 s of fake time:
        # tests/stats/test_stats_http.py). Here the clock is real and 1 000 polls
        # share two loaded cores, so the bound only guards against a hang.
        async with asyncio.timeout(30):
            while True:
                async with session.get(f"{node.url}/v1/rooms/big/online") as resp:
                    if (await resp.json())["online"] == 1000:
                        break
                await asyncio.sleep(0.1)
        polls = [asyncio.create_task(lst.poll(node.url, timeout=30)) for lst in listeners]
        async with asyncio.timeout(20):
            while True:
                async with session.get(f"{node.url}/metrics", headers=ADMIN_HEADERS) as resp:
                    text = await resp.text()
                held = re.search(r"^liveroom_held_polls (\S+)$", text, re.M)
                if held and float(held.group(1)) == 1000:
                    break
                await asyncio.sleep(0.05)
        await send(session, node.url, "big", "hello everyone")
        answers = await asyncio.wait_for(asyncio.gather(*polls), 20)
        assert all([m["body"] for m in a["messages"]] == ["hello everyone"] for a in answers)
        assert all(a["online"] == 1000 for a in answers)


async def test_shutdown_answers_held_polls_with_their_cursors(engine_url: str,
                                                              session: Any) -> None:
    async with running_node(engine_url) as node:
        listener = Listener(session, "bye")
        first = await listener.poll(node.url)
        held = asyncio.create_task(listener.poll(node.url, timeout=30))
        async with asyncio.timeout(5):
            while node.node.proxy.held_polls() < 1:
                await asyncio.sleep(0.01)
        await node.stop()
        answer = await asyncio.wait_for(held, 5)
        assert answer["messages"] == []
        assert answer["important"] == []
        assert (answer["epoch"], answer["seq"], answer["iseq"]) == (
            first["epoch"], first["seq"], first["iseq"])


async def test_a_timeout_answers_empty_with_the_same_cursors(session: Any) -> None:
    async with running_node("memory") as node:
        await send(session, node.url, "t", "one")
        listener = Listener(session, "t")
        first = await listener.poll(node.url)
        answer = await listener.poll(node.url, timeout=1)
        assert (answer["seq"], answer["iseq"], answer["epoch"]) == (
            first["seq"], first["iseq"], first["epoch"])
        assert answer["messages"] == []
        assert answer["gap"] == 0


async def test_a_foreign_epoch_resets_like_a_first_poll(session: Any) -> None:
    async with running_node("memory") as node:
        for i in range(3):
            await send(session, node.url, "e", i)
        listener = Listener(session, "e")
        await listener.poll(node.url)
        listener.epoch = "someotherepoch"
        answer = await listener.poll(node.url)
        assert answer["reset"] is True
        assert [m["body"] for m in answer["messages"]] == [0, 1, 2]
        assert answer["seq"] == 3


async def test_a_cursor_past_the_head_resets_after_a_fresh_pull(session: Any) -> None:
    async with running_node("memory") as node:
        await send(session, node.url, "p", "x")
        listener = Listener(session, "p")
        await listener.poll(node.url)
        listener.seq = listener.iseq = 50
        answer = await listener.poll(node.url)
        assert answer["reset"] is True
        assert answer["seq"] == 1


async def test_msgpack_answers_carry_the_same_fields(session: Any) -> None:
    import msgpack

    async with running_node("memory") as node:
        await send(session, node.url, "m", {"text": "hi"})
        async with session.get(f"{node.url}/v1/rooms/m/poll", params={"uid": "a"},
                               headers={"Accept": "application/msgpack"}) as resp:
            assert resp.content_type == "application/msgpack"
            answer = msgpack.unpackb(await resp.read())
        assert answer["messages"][0]["body"] == {"text": "hi"}
        assert set(answer) == {"room", "epoch", "seq", "iseq", "important", "messages",
                               "gap", "igap", "reset", "ctx", "online", "likes", "interval_ms",
                               "pseq"}
