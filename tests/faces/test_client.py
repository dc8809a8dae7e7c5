"""The Python client (:mod:`liveroom.client`) against a real node over real
sockets: the listening loop's rules, sends and their retries, the operators'
calls; and ``liveroom listen`` / ``liveroom send`` as real processes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
import sys
import time
import zlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from support import (
    ADMIN,
    PUBLISHER,
    Listener,
    Running,
    clean_env,
    deployed_nginx,
    free_port,
    held_polls,
    liveroom_process,
    running_node,
)

from liveroom.client import (
    BACKOFF_FIRST,
    Answer,
    ApiError,
    AuditEntry,
    Client,
    ClientClosed,
    Cursor,
    Given,
    Listening,
    Message,
    Ranking,
    Recalled,
    RecalledPersonal,
    Retry,
    RoomModeration,
    TopGivers,
    Unreachable,
    WordList,
)
from liveroom.clock import FakeClock
from liveroom.ratelimit import RateLimits, Window
from proxy.tickets import mint

TICKET_KEY = "k" * 32
ROOT = Path(__file__).resolve().parents[2]


async def next_answer(listening: Listening, within: float = 10.0) -> Answer:
    async with asyncio.timeout(within):
        return await anext(listening)


async def until_head(client: Client, room: str, seq: int) -> None:
    """Until the node's snapshot of ``room`` reaches ``seq`` (a poll then sees
    every message up to it in one answer)."""
    async with asyncio.timeout(10):
        while (await client.room_stats(room)).seq < seq:
            await asyncio.sleep(0.01)


async def test_listen_delivers_in_order_important_first() -> None:
    async with running_node() as node, Client(node.url, token=PUBLISHER) as client:
        listening = client.listen("hall", uid="ann", timeout=5)
        first = await next_answer(listening)
        assert (first.epoch, first.seq, first.important, first.messages) == ("0", 0, (), ())
        assert not first.reset
        await client.send("hall", "one", uid="bob")
        await client.send("hall", {"text": "two"}, uid="bob")
        await client.send("hall", {"event": "cohost"}, uid="host", important=True)
        await until_head(client, "hall", 3)
        answer = await next_answer(listening)
        assert [m.body for m in answer.delivered] == [{"event": "cohost"}, "one", {"text": "two"}]
        assert [m.seq for m in answer.important] == [3]
        assert [m.seq for m in answer.messages] == [1, 2]
        assert answer.important[0].important
        assert answer.important[0].uid == "host"
        assert (answer.seq, answer.iseq, answer.gap, answer.igap) == (3, 3, 0, 0)
        assert listening.cursor is not None
        assert listening.cursor.seq == 3
        for n in range(4, 7):
            await client.send("hall", n, uid="bob")
        bodies: list[object] = []
        while len(bodies) < 3:
            bodies += [m.body for m in (await next_answer(listening)).delivered]
        assert bodies == [4, 5, 6]
        listening.stop()
        with pytest.raises(StopAsyncIteration):
            await next_answer(listening)


async def test_a_listener_echoes_a_vip_rooms_routing_hint() -> None:
    async with running_node(vip_spread=64) as node, \
            Client(node.url, token=ADMIN) as client:
        assert (await client.vip_pin("stage", "vip")).vip
        listening = client.listen("stage", uid="ann", timeout=1, empty=True)
        first = await next_answer(listening)
        assert first.spread == listening.spread == zlib.crc32(b"ann") % 64 != 7
        # A hint the server did not give (7) is sent on the next poll; the
        # server ignores it and answers the listener's own, which the client
        # echoes from then on.
        listening.spread = 7
        assert (await next_answer(listening)).spread == first.spread
        assert listening.spread == first.spread
        assert (await client.vip_remove("stage")).changed
        assert (await next_answer(listening)).spread is None
        assert listening.spread is None
        listening.stop()


async def test_a_reset_after_the_end_of_a_broadcast() -> None:
    async with running_node() as node, Client(node.url, token=ADMIN) as client:
        await client.send("show", "before", uid="bob")
        listening = client.listen("show", uid="ann", timeout=5)
        first = await next_answer(listening)
        assert [m.body for m in first.messages] == ["before"]
        waiting = asyncio.ensure_future(next_answer(listening))
        ended = await client.end_broadcast("show")
        answer = await waiting
        assert answer.reset
        assert answer.epoch == ended.epoch != first.epoch
        assert ended.broadcast == 2
        await client.send("show", "after", uid="bob")
        answer = await next_answer(listening)
        assert not answer.reset
        assert [m.body for m in answer.messages] == ["after"]
        assert [b.broadcast for b in await client.broadcasts("show")] == [1]
        listening.stop()


async def test_stop_ends_a_held_poll_at_once_and_the_node_lets_it_go() -> None:
    async with running_node() as node, Client(node.url) as client:
        listening = client.listen("quiet", uid="ann", timeout=30)
        await next_answer(listening)
        got: list[Answer] = []

        async def consume() -> None:
            async for answer in listening:
                got.append(answer)

        task = asyncio.ensure_future(consume())
        async with asyncio.timeout(5):
            while node.node.proxy.held_polls() == 0:
                await asyncio.sleep(0.01)
        started = time.monotonic()
        listening.stop()
        await asyncio.wait_for(task, 2)
        assert time.monotonic() - started < 1
        assert got == []
        async with asyncio.timeout(5):
            while node.node.proxy.held_polls():
                await asyncio.sleep(0.01)


async def held(node: Running, polls: int = 1) -> None:
    """Until the node holds ``polls`` polls."""
    async with asyncio.timeout(5):
        while node.node.proxy.held_polls() != polls:
            await asyncio.sleep(0.01)


@pytest.mark.parametrize("route", ["open", "ticket", "ticket-nginx"])
@pytest.mark.parametrize("message", [True, False], ids=["after-a-message", "quiet"])
async def test_leaving_the_client_ends_its_listener(route: str, message: bool,
                                                    tmp_path: Path) -> None:
    """Issue 46: a task iterating ``listen()`` when its client closes has its
    ``async for`` ended at once, without an error, whether the listener heard
    a message or only held a poll, in open mode and in ticket mode, straight
    or through deploy/nginx.conf. It used to poll on, on a session it opened
    anew, so a program that awaited it (or whose ``asyncio.run`` lost its one
    cancellation, see below) never ended."""
    ticketed = route != "open"
    settings: dict[str, Any] = {"auth": "ticket", "ticket_keys": (TICKET_KEY,)} if ticketed else {}
    async with running_node(**settings) as node, contextlib.AsyncExitStack() as stack:
        url = (stack.enter_context(deployed_nginx(tmp_path, [node.url]))
               if route == "ticket-nginx" else node.url)
        sender = await stack.enter_async_context(Client(url, token=PUBLISHER))
        heard: list[object] = []
        delivered = asyncio.Event()
        async with Client(url, ticket=mint(TICKET_KEY, "ann", rooms=["hall"])
                          if ticketed else None) as client:

            async def consume() -> None:
                async for answer in client.listen("hall", uid=None if ticketed else "ann",
                                                  timeout=5):
                    heard.extend(m.body for m in answer.delivered)
                    if answer.delivered:
                        delivered.set()

            listener = asyncio.ensure_future(consume())
            await held(node)
            if message:
                await sender.send("hall", "hi", uid="bob")
                async with asyncio.timeout(5):
                    await delivered.wait()
                await held(node)  # its next poll
        done, _ = await asyncio.wait((listener,), timeout=2)
        listener.cancel()
        assert done, "still listening 2 s after its client closed"
        listener.result()  # its loop ended without an error
        assert heard == (["hi"] if message else [])
        await held(node, 0)  # the node let the poll go
        with pytest.raises(ClientClosed):
            await client.send("hall", "late", uid="bob")
        with pytest.raises(ClientClosed):
            await next_answer(client.listen("hall", uid="ann"))


async def test_closing_the_client_cuts_short_a_send_waiting_out_a_retry_after() -> None:
    """A send past a room's slow mode waits out its Retry-After (a minute
    here) to send again; the client closed meanwhile, it raises
    :class:`ClientClosed` at once, not a minute later."""
    async with running_node() as node, Client(node.url, token=ADMIN) as admin:
        await admin.send("hall", "welcome", uid="host", important=True)
        assert await admin.slow("hall", 60) == 60
        client = Client(node.url)
        await client.send("hall", "first", uid="bob")
        waiting = asyncio.Event()
        second = asyncio.ensure_future(client.send(
            "hall", "second", uid="bob", on_retry=lambda retry: waiting.set()))
        async with asyncio.timeout(10):
            await waiting.wait()  # refused (429), its retry due in about a minute
        await client.close()
        done, _ = await asyncio.wait((second,), timeout=2)
        assert done, "still waiting 2 s after its client closed"
        with pytest.raises(ClientClosed):
            second.result()


async def test_a_client_on_a_closed_session_says_it_is_closed() -> None:
    """A client given a session its owner closed raises :class:`ClientClosed`
    (aiohttp's bare ``RuntimeError`` got through; a listener whose next poll
    met it ended with it), and closing the client leaves that session alone."""
    async with running_node() as node:
        session = aiohttp.ClientSession()
        client = Client(node.url, session=session)
        await client.send("hall", "hi", uid="bob")
        await session.close()
        with pytest.raises(ClientClosed):
            await client.send("hall", "late", uid="bob", retries=0)
        assert not client.closed
        with pytest.raises(ClientClosed):
            await next_answer(client.listen("hall", uid="ann"))
        async with aiohttp.ClientSession() as kept:
            async with Client(node.url, session=kept) as client:
                await client.send("hall", "hi", uid="bob")
            assert client.closed
            assert not kept.closed


async def test_a_listener_cancelled_as_an_answer_comes_ends() -> None:
    """A listener task ends when cancelled, whenever the cancellation comes.
    One that came in the loop iterations after an answer arrived was
    swallowed (the loop awaited its helper tasks with CancelledError
    suppressed) and the task polled on: ``asyncio.run``, which cancels each
    task once, then never returned (issue 46). The cancellation is swept over
    the iterations after a send."""
    async with running_node() as node, Client(node.url) as client:
        for spins in range(24):
            room = f"hall{spins}"
            listening = client.listen(room, uid="ann", timeout=5)
            await next_answer(listening)

            async def consume(listening: Listening = listening) -> None:
                async for _ in listening:
                    pass

            listener = asyncio.ensure_future(consume())
            await held(node)
            await client.send(room, "hi", uid="bob")
            for _ in range(spins):
                await asyncio.sleep(0)
            listener.cancel()
            done, _ = await asyncio.wait((listener,), timeout=2)
            assert done, f"still listening after a cancellation {spins} iterations on"
            assert listener.cancelled()
            await held(node, 0)


LEAVING = """\
import asyncio, sys
from liveroom.client import Client

async def main(url: str, room: str, spins: int) -> None:
    async with Client(url) as client:
        heard = asyncio.Event()

        async def listen() -> None:
            async for answer in client.listen(room, uid="ann", timeout=5):
                if answer.delivered:
                    heard.set()

        listener = asyncio.create_task(listen())
        await client.send(room, "hi", uid="bob")
        await heard.wait()
        await asyncio.sleep(0.1)  # its next poll is held
    for _ in range(spins):
        await asyncio.sleep(0)

for spins in range(16):
    asyncio.run(main(sys.argv[1], f"room{spins}", spins))
    print(spins, flush=True)
"""


async def test_a_program_leaving_the_client_ends() -> None:
    """What issue 46's user saw: a program that leaves ``async with Client``
    while a listener task runs, after it heard a message, and ends with
    ``asyncio.run``. Leaving closed the session under the poll, the
    listener's one cancellation came as the failed poll was put away and was
    swallowed, and ``asyncio.run`` waited for it for ever. The moment it
    leaves is swept over the loop iterations; every run must end."""
    async with running_node() as node:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", LEAVING, node.url, cwd=ROOT, env=clean_env(),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        assert proc.stdout is not None
        assert proc.stderr is not None
        runs: list[str] = []
        try:
            async with asyncio.timeout(20):
                while line := await proc.stdout.readline():
                    runs.append(line.decode().strip())
                await proc.wait()
        except TimeoutError:
            proc.kill()
            await proc.wait()
        err = (await proc.stderr.read()).decode()
        assert runs == [str(n) for n in range(16)], f"asyncio.run hung after runs {runs}"
        assert (proc.returncode, err) == (0, "")


async def test_breaking_out_of_the_loop_and_a_context_manager() -> None:
    async with running_node() as node, Client(node.url) as client:
        await client.send("hall", "hi", uid="bob")
        async with client.listen("hall", uid="ann", recent=1) as listening:
            async for answer in listening:
                assert [m.body for m in answer.messages] == ["hi"]
                break
        assert listening.stopped


async def test_a_listener_resumes_from_its_cursor() -> None:
    async with running_node() as node, Client(node.url) as client:
        async with client.listen("hall", uid="ann", timeout=5) as listening:
            await next_answer(listening)
        cursor = listening.cursor
        assert cursor is not None
        await client.send("hall", "while away", uid="bob")
        resumed = client.listen("hall", uid="ann", timeout=5, cursor=cursor)
        answer = await next_answer(resumed)
        assert not answer.reset
        assert [m.body for m in answer.messages] == ["while away"]
        resumed.stop()


async def test_empty_answers_only_when_asked() -> None:
    async with running_node() as node, Client(node.url) as client:
        listening = client.listen("hall", uid="ann", timeout=1, empty=True)
        first = await next_answer(listening)
        answer = await next_answer(listening)  # the hold timed out
        assert answer.empty
        assert (answer.epoch, answer.seq, answer.iseq) == (first.epoch, first.seq, first.iseq)
        listening.stop()


async def test_a_listener_hears_the_top_givers_when_they_change() -> None:
    clock = FakeClock()  # the node reads the rankings when the test says
    async with running_node(clock=clock) as node, \
            Client(node.url, token=ADMIN) as client:  # gifts, and the broadcast's end
        ranking = node.node.proxy.ranking
        await client.send("hall", "hello", uid="bob")
        listening = client.listen("hall", uid="ann", timeout=1)
        first = await next_answer(listening)
        assert (first.ranking, listening.ranking) == (None, None)  # no gifts yet
        for uid, value in [("a", 30), ("b", 50), ("c", 5), ("d", 1), ("a", 25)]:
            await client.gift("hall", uid, value, "rose")
        await ranking.refresh()
        # A timed-out hold that brings only the ranking is not skipped as empty.
        answer = await next_answer(listening)
        assert answer.ranking is not None
        assert answer.ranking == TopGivers(answer.ranking.version,
                                           (("a", 55), ("b", 50), ("c", 5)))
        assert not answer.delivered
        assert listening.ranking == answer.ranking
        # Echoed: the answers after it do not carry it again.
        await client.send("hall", "next", uid="bob")
        answer = await next_answer(listening)
        assert [m.body for m in answer.delivered] == ["next"]
        assert answer.ranking is None
        assert listening.ranking is not None
        await client.gift("hall", "d", 100, "rocket")
        await ranking.refresh()
        answer = await next_answer(listening)
        assert answer.ranking is not None
        assert answer.ranking.top == (("d", 101), ("a", 55), ("b", 50))
        assert listening.ranking == answer.ranking
        # The broadcast ends: the listener hears once that the top is empty.
        await client.end_broadcast("hall")
        await ranking.refresh()
        async with asyncio.timeout(10):
            answer = await anext(listening)
            while answer.ranking is None:  # the reset may come before the refresh
                answer = await anext(listening)
        assert answer.ranking.top == ()
        assert listening.ranking == answer.ranking
        listening.stop()


async def test_likes_gifts_the_leaderboard_and_the_rooms_likes() -> None:
    """``like()``, ``gift()`` and ``leaderboard()``, and the room's likes in
    ``room_stats()`` (issue 46: ``RoomStats`` had none, though the server
    answers them)."""
    async with running_node() as node, Client(node.url, token=ADMIN) as client:
        with pytest.raises(ApiError) as refused:
            await client.like("hall", uid="ann")  # no such room yet
        assert (refused.value.status, refused.value.code) == (404, "no_such_room")
        await client.send("hall", "hello", uid="bob")
        assert (await client.room_stats("hall")).likes == 0
        assert await client.like("hall", 3, uid="ann") == 3
        assert await client.like("hall", uid="bob") == 4
        stats = await client.room_stats("hall")
        assert (stats.room, stats.seq, stats.likes) == ("hall", 1, 4)
        assert (await client.room_stats("nobody")).likes == 0
        assert await client.gift("hall", "ann", 520, "rocket") == Given("hall", "ann", 1, 520, 520)
        assert await client.gift("hall", "bob", 100, "rose") == Given("hall", "bob", 2, 100, 620)
        assert await client.leaderboard("hall", limit=1) == Ranking("hall", (("ann", 520),),
                                                                    620, 2)
        board = await client.leaderboard("hall")
        assert (board.top, board.total, board.count) == ((("ann", 520), ("bob", 100)), 620, 2)


async def test_a_rate_limit_is_waited_out_for_its_retry_after() -> None:
    limits = RateLimits(per_uid=(Window(1, 1),))
    async with running_node(rate_limits=limits) as node, Client(node.url) as client:
        await client.send("hall", "first", uid="bob")
        with pytest.raises(ApiError) as refused:
            await client.send("hall", "second", uid="bob", retries=0)
        assert (refused.value.status, refused.value.code) == (429, "rate_limited")
        assert refused.value.retry_after == 1
        assert "over 1 sends per 1 s" in refused.value.message
        waits: list[Retry] = []
        started = time.monotonic()
        sent = await client.send("hall", "third", uid="bob", on_retry=waits.append)
        took = time.monotonic() - started
        assert waits
        assert all((w.status, w.delay) == (429, 1) for w in waits)
        assert took >= 0.9 * len(waits)
        assert sent.seq == 2


async def test_a_busy_node_is_waited_out_for_its_retry_after(
        session: aiohttp.ClientSession) -> None:
    # The node holds one poll at most: a second listener's poll is refused
    # with 503 and Retry-After 2, and polls again once that has passed.
    async with running_node(held_max=1) as node, Client(node.url) as client:
        other = Listener(session, "hall", uid="other")
        await other.poll(node.url)
        held = asyncio.ensure_future(other.poll(node.url, timeout=30))
        async with asyncio.timeout(5):
            while node.node.proxy.held_polls() == 0:
                await asyncio.sleep(0.01)
        waits: list[Retry] = []
        listening = client.listen("hall", uid="ann", timeout=5, on_retry=waits.append)
        await next_answer(listening)
        waiting = asyncio.ensure_future(next_answer(listening))
        async with asyncio.timeout(5):
            while not waits:
                await asyncio.sleep(0.01)
        assert (waits[0].status, waits[0].delay, waits[0].reason) == (
            503, 2, "this node holds all the polls it can; retry later")
        started = time.monotonic()
        await client.send("hall", "hello", uid="bob")
        await held  # the other listener's poll is answered: room for ours
        answer = await waiting
        assert [m.body for m in answer.messages] == ["hello"]
        assert time.monotonic() - started > 1  # it waited, not polled again at once
        listening.stop()


async def test_network_errors_back_off_and_stop_ends_the_wait() -> None:
    waits: list[Retry] = []
    async with Client(f"http://127.0.0.1:{free_port()}") as client:
        listening = client.listen("hall", uid="ann", on_retry=waits.append)
        task = asyncio.ensure_future(anext(listening))
        async with asyncio.timeout(10):
            while len(waits) < 2:
                await asyncio.sleep(0.01)
        listening.stop()
        with pytest.raises(StopAsyncIteration):
            await asyncio.wait_for(task, 2)
    assert waits[0].status is None
    assert BACKOFF_FIRST / 2 <= waits[0].delay <= BACKOFF_FIRST
    assert BACKOFF_FIRST <= waits[1].delay <= 2 * BACKOFF_FIRST


async def test_a_refusal_ends_the_loop_with_the_servers_error() -> None:
    async with running_node() as node, Client(node.url) as client:
        with pytest.raises(ApiError) as refused:
            await next_answer(client.listen("hall", uid="ann", timeout=61))
        assert (refused.value.status, refused.value.code) == (400, "bad_request")
        assert "timeout" in refused.value.message
        with pytest.raises(ValueError, match="room must match"):
            client.listen("no/room")
    async with Client(f"http://127.0.0.1:{free_port()}") as client:
        with pytest.raises(Unreachable, match="cannot reach"):
            await client.send("hall", "x", uid="bob", retries=0)


async def test_tickets_name_the_listener_and_the_sender() -> None:
    async with running_node(auth="ticket", ticket_keys=(TICKET_KEY,)) as node:
        async with Client(node.url) as anonymous:
            with pytest.raises(ApiError) as refused:
                await next_answer(anonymous.listen("hall"))
            assert refused.value.status == 401
        ann = mint(TICKET_KEY, "ann", rooms=["hall"])
        async with Client(node.url, ticket=ann) as client:
            listening = client.listen("hall")
            await next_answer(listening)
            await client.send("hall", "mine")
            answer = await next_answer(listening)
            assert [(m.uid, m.body) for m in answer.messages] == [("ann", "mine")]
            async with asyncio.timeout(10):  # heartbeats are merged in the background
                while (members := await client.members("hall")).online == 0:
                    await asyncio.sleep(0.05)
            assert (members.online, members.members) == (1, ("ann",))
            listening.stop()


async def test_the_operators_calls() -> None:
    async with running_node() as node, Client(node.url, token=ADMIN) as client:
        change = await client.vip_add("stage")
        assert (change.room, change.vip, change.changed) == ("stage", True, True)
        assert (await client.vip_add("stage")).changed is False
        assert await client.vip_rooms() == ("stage",)
        assert (await client.room_stats("stage")).vip
        assert (await client.vip_remove("stage")).changed
        assert await client.vip_rooms() == ()
        stats = await client.room_stats("nobody")
        assert (stats.online, stats.viewers, stats.seq) == (0, 0, 0)
        series = await client.online_series("nobody")
        assert series.step > 0
        assert all(p.max == 0 for p in series.points)
        assert await client.broadcasts("nobody") == ()
        listening = client.listen("stage", uid="ann", timeout=5)
        await next_answer(listening)
        async with asyncio.timeout(20):  # the node announces itself every few seconds
            while not (rooms := await client.biggest_rooms(limit=5)):
                await asyncio.sleep(0.1)
        assert [(r.room, r.online, r.vip) for r in rooms] == [("stage", 1, False)]
        nodes = await client.nodes()
        assert len(nodes) == 1
        assert nodes[0].rooms_listed == 1
        listening.stop()
    async with running_node() as node, Client(node.url, token=PUBLISHER) as client:
        with pytest.raises(ApiError) as refused:
            await client.vip_add("stage")
        assert (refused.value.status, refused.value.code) == (403, "forbidden")


async def test_a_listener_hears_of_recalls_and_newcomers_read_tombstones() -> None:
    async with running_node() as node, Client(node.url, token=ADMIN) as client, \
            Client(node.url) as open_client:
        rude = (await client.send("hall", "rude words", uid="troll")).seq
        oops = (await client.send("hall", "oops", uid="fan")).seq
        listening = client.listen("hall", uid="ann", timeout=1)
        first = await next_answer(listening)
        assert [(m.body, m.recalled) for m in first.delivered] == [
            ("rude words", False), ("oops", False)]
        assert first.recalled == ()
        assert await client.recall("hall", rude) == Recalled("hall", rude, "troll", oops + 1)
        # An answer that brings only the recall is not skipped as empty.
        answer = await next_answer(listening)
        assert (answer.recalled, answer.delivered) == ((rude,), ())
        assert not answer.empty
        # Its sender recalls its own (open mode: it names itself), nobody else's.
        with pytest.raises(ApiError) as refused:
            await open_client.recall("hall", oops, uid="troll")
        assert (refused.value.status, refused.value.code) == (403, "forbidden")
        assert (await open_client.recall("hall", oops, uid="fan")).uid == "fan"
        assert (await next_answer(listening)).recalled == (oops,)
        # A newcomer reads the tombstones, not the bodies.
        newcomer = await next_answer(client.listen("hall", uid="new", timeout=1))
        assert newcomer.messages == tuple(
            Message(seq, uid, False, m.ts, None, recalled=True)
            for (seq, uid), m in zip([(rude, "troll"), (oops, "fan")], newcomer.messages,
                                     strict=True))
        with pytest.raises(ApiError) as refused:
            await client.recall("hall", 99)
        assert refused.value.status == 404
        with pytest.raises(ValueError, match="seq must be"):
            await client.recall("hall", 0)
        listening.stop()


async def test_a_listener_hears_of_its_personal_messages_recalled() -> None:
    async with running_node() as node, Client(node.url, token=PUBLISHER) as client:
        await client.send("hall", "hello", uid="host")
        listening = client.listen("hall", uid="alice", timeout=1)
        first = await next_answer(listening)
        sent = await client.send("hall", "you won", uid="system", to="alice")
        assert sent.pseq is not None
        answer = await next_answer(listening)
        assert [(m.body, m.recalled) for m in answer.personal] == [("you won", False)]
        done = await client.recall_personal("hall", sent.pseq)
        assert done == RecalledPersonal("hall", sent.pseq, "system", "alice", sent.pseq + 1)
        # An answer that brings only the recall is not skipped as empty.
        answer = await next_answer(listening)
        assert (answer.precalled, answer.personal, answer.delivered) == ((sent.pseq,), (), ())
        # A listener resuming from before it reads its tombstone.
        late = client.listen("hall", uid="alice", timeout=1, cursor=Cursor(
            first.epoch, first.seq, first.iseq, pseq=sent.pseq - 1))
        caught_up = await next_answer(late)
        assert caught_up.precalled == (sent.pseq,)
        assert [(m.pseq, m.uid, m.body, m.recalled) for m in caught_up.personal] == [
            (sent.pseq, "system", None, True)]
        with pytest.raises(ApiError) as refused:
            await client.recall_personal("hall", sent.pseq + 7)
        assert refused.value.status == 404
        listening.stop()
        late.stop()

async def test_the_moderators_calls() -> None:
    async with running_node() as node, Client(node.url, token=ADMIN) as client, \
            Client(node.url) as chat:
        await chat.send("hall", "hello", uid="troll")
        mute = await client.mute("hall", "troll", 600, "spam")
        assert mute is not None
        assert (mute.room, mute.uid, mute.seconds_left, mute.reason, mute.by) == (
            "hall", "troll", 600, "spam", "admin")
        assert mute.until_ms - mute.at_ms == 600_000
        with pytest.raises(ApiError) as refused:
            await chat.send("hall", "again", uid="troll")
        assert (refused.value.status, refused.value.code) == (403, "muted")
        assert "600 s" in refused.value.message
        assert [m.uid for m in await client.mutes("hall")] == ["troll"]
        await client.unmute("hall", "troll")
        assert await client.mutes("hall") == ()
        await chat.send("hall", "sorry", uid="troll")

        ban = await client.ban("hall", "spammer", reason="links")
        assert ban is not None
        assert (ban.uid, ban.until_ms, ban.seconds_left, ban.reason) == (
            "spammer", 0, None, "links")
        timed = await client.ban("hall", "other", 3600)
        assert timed is not None
        assert timed.seconds_left == 3600
        assert [b.uid for b in await client.bans("hall")] == ["other", "spammer"]
        with pytest.raises(ApiError) as refused:
            await anext(chat.listen("hall", uid="spammer"))  # a refusal ends the loop
        assert (refused.value.status, refused.value.code) == (403, "banned")
        await client.unban("hall", "spammer")
        await next_answer(chat.listen("hall", uid="spammer"))

        assert await client.slow("hall", 30) == 30
        state = await client.moderation("hall")
        assert (state.room, state.slow, state.muted, state.banned) == ("hall", 30, 0, 1)
        assert [(e.action, e.target, e.seconds, e.reason, e.by) for e in state.audit] == [
            ("slow", "", 30, "", "admin"), ("unban", "spammer", 0, "", "admin"),
            ("ban", "other", 3600, "", "admin"), ("ban", "spammer", 0, "links", "admin"),
            ("unmute", "troll", 0, "", "admin"), ("mute", "troll", 600, "spam", "admin")]
        assert isinstance(state.audit[0], AuditEntry)
        latest = await client.moderation("hall", limit=1)
        assert latest == RoomModeration("hall", 30, 0, 1, state.audit[:1])
        with pytest.raises(ApiError) as refused:
            await client.mute("hall", "troll", 0)
        assert refused.value.status == 400
    async with running_node() as node, Client(node.url, token=PUBLISHER) as client:
        for call in (client.mute("hall", "troll", 60), client.unban("hall", "troll"),
                     client.bans("hall"), client.slow("hall", 5), client.moderation("hall")):
            with pytest.raises(ApiError) as refused:
                await call
            assert (refused.value.status, refused.value.code) == (403, "forbidden")


async def test_the_review_calls() -> None:
    from liveroom.client import Approved, Denied, HeldMessage, ReviewQueue
    from liveroom.model import NewMessage

    async with running_node() as node, Client(node.url, token=ADMIN) as client:
        await client.send("hall", "hello", uid="host")
        hold = node.node.review.hold
        await hold("hall", NewMessage("bob", {"t": "darn"}, False, 5), "word: darn")
        await hold("hall", NewMessage("host", "psst", True, 6, to="al"), "hook")
        await hold("hall", NewMessage("eve", "rude", False, 7), "hook")
        assert await client.held("hall", limit=2) == ReviewQueue("hall", 3, (
            HeldMessage("1", "bob", "normal", {"t": "darn"}, 5, "word: darn"),
            HeldMessage("2", "host", "personal", "psst", 6, "hook", to="al")))
        approved = await client.approve("hall", "1")
        assert approved == Approved("hall", "1", "bob", approved.epoch, 2, "normal")
        assert await client.approve("hall", "1") == approved
        assert await client.approve("hall", "2") == Approved("hall", "2", "host",
                                                             approved.epoch, 1, "personal", "al")
        assert await client.deny("hall", "3") == Denied("hall", "3", "eve")
        with pytest.raises(ApiError) as refused:
            await client.approve("hall", "3")
        assert (refused.value.status, refused.value.code) == (409, "conflict")
        with pytest.raises(ValueError, match="id is its digits"):
            await client.deny("hall", "../x")
        assert (await client.held("hall")).count == 0
    async with running_node() as node, Client(node.url, token=PUBLISHER) as client:
        for call in (client.held("hall"), client.approve("hall", "1"), client.deny("hall", "1")):
            with pytest.raises(ApiError) as refused:
                await call
            assert (refused.value.status, refused.value.code) == (403, "forbidden")
async def test_the_word_filters_calls_and_a_held_send() -> None:
    async with running_node() as node, Client(node.url, token=ADMIN) as client, \
            Client(node.url) as chat:
        stored = await client.put_word_list("rude", ["bad", "坏人"], "mask", ["hall"])
        assert isinstance(stored, WordList)
        assert (stored.name, stored.action, stored.rooms, stored.words) == (
            "rude", "mask", ("hall",), ("bad", "坏人"))
        await client.put_word_list("links", ["http"], "hold")
        await client.put_word_list("scams", ["free money"], "block")
        assert [w.name for w in await client.word_lists()] == ["links", "rude", "scams"]
        sent = await chat.send("hall", "so BAD", uid="fan")
        assert (sent.seq, sent.held) == (1, None)
        with pytest.raises(ApiError) as refused:
            await chat.send("hall", "free money!", uid="fan")
        assert (refused.value.status, refused.value.code) == (403, "filtered")
        sent = await chat.send("hall", "see http", uid="fan")
        assert (sent.seq, sent.epoch, sent.held) == (0, "", "1")
        queue = await client.held("hall")
        assert [(h.id, h.uid, h.body, h.why) for h in queue.held] == [
            ("1", "fan", "see http", "word lists: links")]
        sends = node.node.proxy.sends
        review, sends.review = sends.review, None
        with pytest.raises(ApiError) as refused:  # no queue: said at once, not retried
            await chat.send("hall", "see http", uid="fan", on_retry=lambda retry: pytest.fail(
                "retried"))
        assert (refused.value.status, refused.value.code) == (503, "review_unavailable")
        sends.review = review
        answer = await next_answer(chat.listen("hall", uid="fan", recent=10))
        assert [m.body for m in answer.messages] == ["so ***"]
        await client.delete_word_list("rude")
        with pytest.raises(ApiError) as refused:
            await client.delete_word_list("rude")
        assert (refused.value.status, refused.value.code) == (404, "not_found")
        with pytest.raises(ValueError, match="word list's name"):
            await client.delete_word_list("..")
        assert [w.name for w in await client.word_lists()] == ["links", "scams"]


async def test_a_listener_hears_when_slow_mode_changes() -> None:
    async with running_node() as node, Client(node.url, token=ADMIN) as client:
        await client.send("hall", "hello", uid="bob")
        listening = client.listen("hall", uid="ann", timeout=1)
        first = await next_answer(listening)
        assert (first.slow, listening.slow) == (0, 0)
        await client.slow("hall", 5)
        # The next answer with slow mode in it is yielded, though it brings nothing else.
        answer = await next_answer(listening)
        assert (answer.slow, answer.delivered, listening.slow) == (5, (), 5)
        await client.send("hall", "next", uid="bob")
        answer = await next_answer(listening)  # still slow: not news, but a message
        assert ([m.body for m in answer.delivered], answer.slow) == (["next"], 5)
        await client.slow("hall", 0)
        answer = await next_answer(listening)
        assert (answer.slow, answer.delivered, listening.slow) == (0, (), 0)
        listening.stop()


async def test_a_listener_hears_a_new_likes_total_in_a_quiet_room() -> None:
    """The node answers a quiet room's held polls with a new total (news):
    the listener yields that answer, though it brings no message."""
    async with running_node() as node, Client(node.url) as client:
        await client.send("hall", "hello", uid="bob")
        listening = client.listen("hall", uid="ann", timeout=20)
        first = await next_answer(listening)
        assert first.likes == 0
        polled = asyncio.ensure_future(next_answer(listening, within=20))
        await held_polls(node.node.proxy.holds, 1)  # the next poll waits, held
        await client.like("hall", 7, uid="bob")
        async with asyncio.timeout(5):  # well before the poll's 20 s timeout
            answer = await polled
        assert (answer.likes, answer.delivered) == (7, ())
        listening.stop()


# -- liveroom listen / liveroom send, real processes ---------------------------------

async def liveroom(*args: str, **env: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "liveroom", *args, env=clean_env(**env),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    stdout, stderr = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode is not None
    return proc.returncode, stdout.decode(), stderr.decode()


async def lines_of(stream: asyncio.StreamReader) -> AsyncIterator[str]:
    while raw := await stream.readline():
        yield raw.decode().rstrip("\n")


async def test_the_listen_and_send_commands() -> None:
    async with running_node() as node, Client(node.url, token=ADMIN) as client, \
            liveroom_process("listen", "hall", "--uid", "ann",
                             env=clean_env(LIVEROOM_URL=node.url)) as proc:
        assert proc.stdout is not None
        assert proc.stderr is not None
        notes = lines_of(proc.stderr)
        async with asyncio.timeout(15):
            note = await anext(notes)
        assert note.startswith("-- listening to hall (epoch 0, seq 0, ")
        code, out, err = await liveroom("send", "hall", "hello there", "--uid", "bob",
                                        LIVEROOM_URL=node.url)
        assert (code, out, err) == (0, "1\n", "")
        code, out, err = await liveroom(
            "send", "hall", '{"event": "cohost"}', "--json", "--important",
            "--uid", "host", "--url", node.url, LIVEROOM_PUBLISHER_TOKEN=PUBLISHER)
        assert (code, out) == (0, "2\n"), err
        messages = lines_of(proc.stdout)
        async with asyncio.timeout(10):
            assert await anext(messages) == "1 bob: hello there"
            assert await anext(messages) == '2 [important] host: {"event": "cohost"}'
        await client.end_broadcast("hall")
        async with asyncio.timeout(10):
            note = await anext(notes)
        assert note.startswith("-- reset: the room goes on in epoch "), note
        # The ended broadcast's messages are not printed again: the next
        # line is what comes after the end.
        code, out, err = await liveroom("send", "hall", "next show", "--uid", "bob",
                                        LIVEROOM_URL=node.url)
        assert (code, out) == (0, "3\n"), err
        async with asyncio.timeout(10):
            assert await anext(messages) == "3 bob: next show"
        proc.send_signal(signal.SIGINT)
        async with asyncio.timeout(5):
            assert await proc.wait() == 0
        rest = await proc.stderr.read()
        assert b"Traceback" not in rest, rest


async def test_the_listen_command_prints_json_lines() -> None:
    async with running_node() as node, Client(node.url) as client:
        await client.send("hall", {"text": "hi"}, uid="bob")
        async with liveroom_process("listen", "hall", "--json", "--recent", "5",
                                    "--url", node.url, env=clean_env()) as proc:
            assert proc.stdout is not None
            assert proc.stderr is not None
            async with asyncio.timeout(15):
                note = json.loads(await proc.stderr.readline())
                line = json.loads(await proc.stdout.readline())
            assert note["note"].startswith("listening to hall")
            assert {k: line[k] for k in ("seq", "uid", "important", "body")} == {
                "seq": 1, "uid": "bob", "important": False, "body": {"text": "hi"}}
            proc.send_signal(signal.SIGTERM)
            async with asyncio.timeout(5):
                assert await proc.wait() == 0


async def test_the_send_command_refused_and_without_a_uid() -> None:
    async with running_node() as node:
        code, out, err = await liveroom("send", "hall", "x", "--uid", "bob", "--important",
                                        "--url", node.url)
        assert code == 1
        assert out == ""
        assert err == ("Error: send Authorization: Bearer <token> (give --token or set "
                       "LIVEROOM_PUBLISHER_TOKEN) (HTTP 401)\n")
        # Without --uid, a made-up sender, said on stderr (as listen makes up a listener).
        code, out, err = await liveroom("send", "hall", "x", "--url", node.url)
        assert (code, out) == (0, "1\n"), err
        assert re.fullmatch(r"-- sending as sender-[0-9a-f]{6} \(give --uid to choose\)\n", err)
        code, _, err = await liveroom("listen", "no/room", "--url", node.url)
        assert code == 2
        assert "room must match" in err


@pytest.mark.parametrize("command", ["listen", "send"])
async def test_the_commands_explain_themselves(command: str) -> None:
    code, out, _ = await liveroom(command, "--help")
    assert code == 0
    text = " ".join(out.split())
    for option, env in [("--url", "LIVEROOM_URL"), ("--ticket", "LIVEROOM_TICKET"),
                        ("--uid", "LIVEROOM_UID")]:
        assert option in text
        assert f"env var: {env}" in text
    assert ("Ctrl-C" if command == "listen" else "print its seq") in text
