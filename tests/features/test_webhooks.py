"""Event webhooks end to end (``liveroom/events.py``, ``liveroom/webhooks.py``,
issue 47 item 4): real nodes over real sockets, and a real receiver (an
aiohttp application on a loopback port, :class:`Ledger`) that checks each
event's signature and keeps every event it took, by id.

- every action writes its event once, with its fields;
- the signature verifies, and a receiver can refuse an old ``t``;
- the receiver stopped and started mid-run: every event arrives (0 lost of
  N, each id once after dedupe), on one Redis and on a Redis Cluster;
- a node killed while it delivers (a real ``liveroom serve`` process):
  another takes the outbox over, 0 lost;
- a move that fails right after the actions' scripts ran (a recall, a ban,
  a gift, a broadcast's end): the actions stand, their events wait in
  their rooms and the sweep delivers each once, on one Redis and on a
  Redis Cluster; the same recall twice is one event;
- an event given up after ``--webhook-retry-for`` waits in the failed list
  (HTTP and ``liveroom webhooks failed``), and a replay (HTTP and
  ``liveroom webhooks replay``) delivers it under its id.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from conftest import fresh_engine_url
from support import (
    ADMIN,
    ADMIN_HEADERS,
    PUBLISHER,
    SHARED_SECRET,
    clean_env,
    free_port,
    liveroom_process,
    running_node,
    serve,
)

from liveroom.clock import FakeClock
from liveroom.errors import ConfigError, StoreUnavailable
from liveroom.events import SWEEP_EVERY, SWEEP_GRACE_MS, TYPES
from liveroom.model import NewMessage
from liveroom.settings import Settings, settings_from
from liveroom.signature import HEADER, sign, verify
from liveroom.store.base import EVENT_ID_MAX, FAILED_LIST_MAX
from liveroom.webhooks import BACKOFF_MAX, TURN, backoff
from proxy.webhooks.routes import REPLAY_BODY_MAX

SECRET = "webhook-secret-of-the-tests-0123456789"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "backend.py"
ROOM = "hooked-room"
PUBLISHER_HEADERS = {"Authorization": f"Bearer {PUBLISHER}"}
WAIT = 10.0
"""Seconds a test waits for events to arrive, at most (they take a turn
or two: well under a second, but the machine's 2 cores are shared)."""


def _example() -> Any:
    spec = importlib.util.spec_from_file_location("example_backend_webhooks", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_EXAMPLE = _example()
EXAMPLE_EVENTS = _EXAMPLE.EVENTS


def example_backend(secret: str) -> web.Application:
    """The docs' example backend (examples/backend.py), keyed with ``secret``."""
    app: web.Application = _EXAMPLE.backend(secret)
    return app


class Ledger:
    """A backend's webhook receiver: it verifies each POST's signature
    (refusing a bad or old one, 401), answers :attr:`status` (200 unless a
    test says otherwise) and, when it answers 2xx, keeps the event by its
    id (a repeat is counted, not kept twice)."""

    def __init__(self, secret: str = SECRET) -> None:
        self.secret = secret
        self.status = 200
        self.events: dict[str, dict[str, Any]] = {}
        self.posts = 0
        self.repeats = 0
        self.refused = 0
        self.raw: list[tuple[str, bytes]] = []
        """Every POST's signature header and body, as they came."""
        self._changed = asyncio.Condition()

    async def take(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.posts += 1
        self.raw.append((request.headers.get(HEADER, ""), body))
        async with self._changed:  # a POST, taken or not: wait() may count them
            self._changed.notify_all()
        if not verify(self.secret, request.headers.get(HEADER), body, time.time()):
            self.refused += 1
            return web.json_response({"error": "bad signature"}, status=401)
        if self.status >= 300:
            return web.json_response({"error": "not now"}, status=self.status)
        doc = orjson.loads(body)
        if doc["id"] in self.events:
            self.repeats += 1
        self.events.setdefault(doc["id"], doc)
        async with self._changed:
            self._changed.notify_all()
        return web.json_response({"ok": True}, status=self.status)

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events.values() if e["type"] == kind]

    async def wait(self, done: Callable[[], bool], within: float = WAIT) -> None:
        try:
            async with asyncio.timeout(within), self._changed:
                await self._changed.wait_for(done)
        except TimeoutError:
            raise AssertionError(
                f"after {within} s the receiver has {len(self.events)} events of "
                f"{sorted(e['type'] for e in self.events.values())}, {self.posts} posts, "
                f"{self.refused} refused") from None

    def application(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/events", self.take)
        return app


@asynccontextmanager
async def receiving(ledger: Ledger, port: int) -> AsyncIterator[str]:
    """The ledger on loopback ``port``: its events URL, until the block ends
    (then the port is closed: the receiver is down)."""
    runner = web.AppRunner(ledger.application(), shutdown_timeout=0.5)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port, reuse_address=True).start()
    try:
        yield f"http://127.0.0.1:{port}/events"
    finally:
        await runner.cleanup()


def hooked(url: str, **overrides: Any) -> dict[str, Any]:
    """A node's settings for webhooks at ``url`` (every gift an event)."""
    return {"webhook": url, "webhook_secret": SECRET, "webhook_gift_min": 1,
            "secret": SHARED_SECRET, **overrides}


async def call(session: aiohttp.ClientSession, method: str, url: str, *,
               json: Any = None, headers: dict[str, str] | None = None,
               expect: int | tuple[int, ...] = (200, 201, 202)) -> Any:
    async with session.request(method, url, json=json,
                               headers=ADMIN_HEADERS if headers is None else headers) as resp:
        doc = await resp.json()
        wanted = (expect,) if isinstance(expect, int) else expect
        assert resp.status in wanted, (resp.status, doc)
        return doc


async def mutes(session: aiohttp.ClientSession, url: str, count: int, *,
                first: int = 0) -> None:
    """``count`` mutes (``uid.muted`` events), of uids ``u<first>``..."""
    for n in range(first, first + count):
        await call(session, "PUT", f"{url}/v1/admin/rooms/{ROOM}/muted/u{n}",
                   json={"seconds": 60})


# --- every action writes its event ----------------------------------------------------


async def test_each_action_writes_its_event_once_with_its_fields(
        session: aiohttp.ClientSession) -> None:
    ledger = Ledger()
    async with receiving(ledger, free_port()) as hook, \
            running_node(**hooked(hook, gift_important=0, review_max=1)) as node:
        url, admin = node.url, f"{node.url}/v1/admin/rooms/{ROOM}"
        await call(session, "POST", f"{admin}/start")
        sent = await call(session, "POST", f"{url}/v1/rooms/{ROOM}/messages",
                          json={"uid": "bob", "body": "hello"})
        await call(session, "POST", f"{url}/v1/rooms/{ROOM}/gifts",
                   json={"uid": "fan", "value": 50, "gift": "rocket"},
                   headers=PUBLISHER_HEADERS)
        await call(session, "PUT", f"{admin}/muted/eve", json={"seconds": 60, "reason": "x"})
        await call(session, "PUT", f"{admin}/banned/mal", json={})
        await call(session, "DELETE", f"{admin}/banned/mal")
        await call(session, "DELETE", f"{url}/v1/rooms/{ROOM}/messages/{sent['seq']}")
        held = node.node.review
        message = NewMessage("bob", "darn it", False, int(time.time() * 1000))
        first = await held.hold(ROOM, message, "word: darn")
        await call(session, "POST", f"{admin}/review/{first}/approve")
        second = await held.hold(ROOM, message, "word: darn")
        await call(session, "POST", f"{admin}/review/{second}/deny")
        third = await held.hold(ROOM, message, "word: darn")
        await held.hold(ROOM, message, "word: darn")  # the queue holds one: third dropped
        await call(session, "PUT", f"{url}/v1/admin/vip/{ROOM}")
        await call(session, "POST", f"{admin}/end")
        await ledger.wait(lambda: len(ledger.events) >= len(TYPES) + 3)
        await asyncio.sleep(0.3)  # nothing more comes
    # Every type once, but message.held: four messages were held.
    assert sorted(e["type"] for e in ledger.events.values()) == \
        sorted([*TYPES, *["message.held"] * 3])
    assert (ledger.repeats, ledger.refused) == (0, 0)
    for event in ledger.events.values():
        assert event["room"] == ROOM
        assert event["id"].startswith("ev_")
        assert abs(event["at_ms"] / 1000 - time.time()) < 60
    (started,) = ledger.of("broadcast.started")
    assert (started["broadcast"], started["created"]) == (1, True)
    (gift,) = ledger.of("gift.given")
    assert (gift["uid"], gift["gift"], gift["value"], gift["rank"], gift["total"]) == \
        ("fan", "rocket", 50, 1, 50)
    (muted,) = ledger.of("uid.muted")
    assert (muted["uid"], muted["seconds"], muted["reason"], muted["by"]) == \
        ("eve", 60, "x", "admin")
    assert ledger.of("uid.banned")[0]["uid"] == ledger.of("uid.unbanned")[0]["uid"] == "mal"
    (recalled,) = ledger.of("message.recalled")
    assert (recalled["seq"], recalled["uid"], recalled["lane"], recalled["by"]) == \
        (sent["seq"], "bob", "room", "admin")
    assert [(e["held_id"], e["uid"], e["kind"], e["body"], e["why"])
            for e in sorted(ledger.of("message.held"), key=lambda e: int(e["held_id"]))] == \
        [(str(n), "bob", "normal", "darn it", "word: darn") for n in range(1, 5)]
    (dropped,) = ledger.of("message.dropped")
    assert (dropped["held_id"], dropped["uid"], dropped["why"]) == (third, "bob", "word: darn")
    (approved,) = ledger.of("message.approved")
    assert (approved["held_id"], approved["uid"], approved["kind"]) == (first, "bob", "normal")
    assert approved["seq"] > sent["seq"]
    (denied,) = ledger.of("message.denied")
    assert (denied["held_id"], denied["uid"]) == (second, "bob")
    (moved,) = ledger.of("room.sect_changed")
    assert moved["sect"] == "vip"
    (ended,) = ledger.of("broadcast.ended")
    assert ended["broadcast"] == 1
    assert (ended["gifts"], ended["ranking"]) == (50, [{"uid": "fan", "score": 50}])
    assert {"viewers", "likes"} <= set(ended)


async def test_no_webhook_no_event_written(session: aiohttp.ClientSession) -> None:
    async with running_node(secret=SHARED_SECRET) as node:
        await mutes(session, node.url, 1)
        assert node.node.webhooks is None
        assert await node.node.store.outbox.waiting() == 0


# --- the signature --------------------------------------------------------------------


async def test_the_signature_verifies_and_an_old_t_can_be_refused(
        session: aiohttp.ClientSession) -> None:
    ledger = Ledger()
    async with receiving(ledger, free_port()) as hook, running_node(**hooked(hook)) as node:
        await mutes(session, node.url, 1)
        await ledger.wait(lambda: len(ledger.events) == 1)
    ((header, body),) = ledger.raw
    t = int(header.split(",")[0].removeprefix("t="))
    assert abs(t - time.time()) < 60
    assert verify(SECRET, header, body, time.time())
    assert not verify(SECRET, header, body, time.time() + 400)  # replayed later: refused
    assert not verify("another-secret-of-32-bytes-at-least-00", header, body, time.time())
    assert not verify(SECRET, header, body + b" ", time.time())


# --- nothing lost -----------------------------------------------------------------------


@pytest.fixture(params=["redis", pytest.param("cluster", marks=pytest.mark.cluster)])
def shared_url(request: pytest.FixtureRequest) -> str:
    """One Redis, then a Redis Cluster: empty."""
    return fresh_engine_url(request.param, request)


async def test_the_receiver_down_then_up_loses_nothing(
        session: aiohttp.ClientSession, shared_url: str) -> None:
    ledger, port, count = Ledger(), free_port(), 40
    hook = f"http://127.0.0.1:{port}/events"
    async with running_node(shared_url, **hooked(hook)) as one, \
            running_node(shared_url, **hooked(hook)) as two:
        async with receiving(ledger, port):
            await mutes(session, one.url, 10)
            await mutes(session, two.url, 10, first=10)
            await ledger.wait(lambda: len(ledger.events) == 20)
        # The receiver is down (its port closed): these wait, retried.
        await mutes(session, one.url, 10, first=20)
        await mutes(session, two.url, 10, first=30)
        await asyncio.sleep(0.5)
        async with receiving(ledger, port):
            await ledger.wait(lambda: len(ledger.events) == count)
        outbox = one.node.store.outbox
        delivering = [n for n in (one, two) if n.node.webhooks and n.node.webhooks.holding]
        assert len(delivering) == 1
        for _ in range(50):  # the last "done" lands just after the last answer
            if await outbox.waiting() == 0:
                break
            await asyncio.sleep(0.05)
        assert await outbox.waiting() == 0
    uids = sorted(int(e["uid"][1:]) for e in ledger.of("uid.muted"))
    assert uids == list(range(count))  # 0 lost of 40, each id once


async def test_events_waiting_behind_a_room_head_in_backoff_do_not_spin_the_loop(
        session: aiohttp.ClientSession) -> None:
    """A room's second event waits for its head; while the head waits out
    its backoff (the receiver failing), the delivering node reads the outbox
    once a turn (about 5 a second), not without pause: the events behind a
    head were taken as due at once, and the loop never slept."""
    ledger = Ledger()
    ledger.status = 500
    async with receiving(ledger, free_port()) as hook, \
            running_node(**hooked(hook)) as node:
        outbox = node.node.store.outbox
        reads = 0
        read = outbox.next

        async def counted(*args: Any, **kwargs: Any) -> Any:
            nonlocal reads
            reads += 1
            return await read(*args, **kwargs)

        outbox.next = counted  # type: ignore[method-assign]
        await mutes(session, node.url, 2)  # two events of one room
        await ledger.wait(lambda: ledger.posts >= 1)  # the head refused: in backoff
        first, started = reads, time.monotonic()
        await ledger.wait(lambda: ledger.posts >= 2)  # its retry, 0.25 to 0.5 s later
        took = time.monotonic() - started
        assert reads - first <= took / TURN + 3, (reads - first, took)


async def test_events_whose_move_failed_after_their_actions_are_swept_once(
        session: aiohttp.ClientSession, shared_url: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The actions' scripts run, then every move to the outbox fails (as a
    Redis connection lost right after the script would): the actions
    answer as done, their events wait in the room, and the delivering
    node's sweep (its own, on its clock) delivers each once. A recall
    repeated is one event."""
    ledger, clock = Ledger(), FakeClock(time.time())
    async with receiving(ledger, free_port()) as hook, \
            running_node(shared_url, clock=clock, **hooked(hook, gift_important=0)) as node:
        url, admin = node.url, f"{node.url}/v1/admin/rooms/{ROOM}"
        outbox = node.node.store.outbox
        await call(session, "POST", f"{admin}/start")
        sent = await call(session, "POST", f"{url}/v1/rooms/{ROOM}/messages",
                          json={"uid": "bob", "body": "hello"})
        await ledger.wait(lambda: len(ledger.events) == 1)  # broadcast.started

        async def lost(*args: Any, **kwargs: Any) -> None:
            raise StoreUnavailable("redis unavailable while moving a room's events: "
                                   "the connection was lost")

        monkeypatch.setattr(outbox, "move", lost)
        await call(session, "DELETE", f"{url}/v1/rooms/{ROOM}/messages/{sent['seq']}")
        await call(session, "DELETE", f"{url}/v1/rooms/{ROOM}/messages/{sent['seq']}")
        await call(session, "PUT", f"{admin}/banned/mal", json={"reason": "spam"})
        await call(session, "POST", f"{url}/v1/rooms/{ROOM}/gifts",
                   json={"uid": "fan", "value": 50, "gift": "rocket"},
                   headers=PUBLISHER_HEADERS)
        await call(session, "POST", f"{admin}/end")
        assert [orjson.loads(e)["type"] for e in await outbox.pending(ROOM)] == \
            ["message.recalled", "uid.banned", "gift.given", "broadcast.ended"]
        monkeypatch.undo()  # the store answers again
        assert await node.node.events.sweep() == 0  # too recent: the acting node's
        # The delivering node's next sweep (it swept when it took the lease).
        await clock.advance(max(SWEEP_EVERY, SWEEP_GRACE_MS / 1000) + 1)
        await ledger.wait(lambda: len(ledger.events) == 5)
        assert await outbox.pending(ROOM) == []
        await asyncio.sleep(0.3)  # nothing more comes
    assert sorted(e["type"] for e in ledger.events.values()) == sorted(
        ["broadcast.started", "message.recalled", "uid.banned", "gift.given",
         "broadcast.ended"])
    assert (ledger.repeats, ledger.refused) == (0, 0)
    (recalled,) = ledger.of("message.recalled")
    assert (recalled["uid"], recalled["seq"], recalled["by"]) == ("bob", sent["seq"], "admin")
    assert ledger.of("uid.banned")[0]["reason"] == "spam"
    (gift,) = ledger.of("gift.given")
    assert (gift["rank"], gift["score"], gift["total"]) == (1, 50, 50)
    (ended,) = ledger.of("broadcast.ended")
    assert (ended["broadcast"], ended["gifts"], ended["ranking"]) == \
        (1, 50, [{"uid": "fan", "score": 50}])


async def test_events_a_lost_reply_gave_the_delivering_node_are_claimed_back(
        session: aiohttp.ClientSession, shared_url: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A read of the outbox whose reply is lost (the connection drops after
    Redis gave the events to this node): the events are the node's in the
    store, yet not held. The next turn claims them back, while the node
    keeps the lease: each delivered once."""
    ledger = Ledger()
    async with receiving(ledger, free_port()) as hook, \
            running_node(shared_url, **hooked(hook)) as node:
        outbox = node.node.store.outbox
        read = outbox.next
        lost: list[Any] = []

        async def lost_once(holder: str, count: int) -> list[Any]:
            events = await read(holder, count)
            if events and not lost:
                lost.extend(events)
                raise StoreUnavailable("redis unavailable while reading the outbox: "
                                       "the connection was lost")
            return events

        monkeypatch.setattr(outbox, "next", lost_once)
        await mutes(session, node.url, 3)
        await ledger.wait(lambda: len(ledger.events) == 3)
        assert lost
        webhooks = node.node.webhooks
        assert webhooks is not None
        assert webhooks.holding  # the lease stayed this node's
    assert (ledger.repeats, ledger.refused) == (0, 0)


async def test_the_clis_store_actions_keep_their_events_for_the_delivering_node(
        session: aiohttp.ClientSession, shared_url: str) -> None:
    """``liveroom mute|room end|vip pin ... --store`` act in the store with no
    node: their events are kept with their actions as a node keeps them,
    and the delivering node's sweep (or its read of the outbox) delivers
    them, a ``broadcast.ended`` completed with its figures. Without a node
    delivering, a --store action keeps no event (nobody would move it)."""
    from click.testing import CliRunner

    from liveroom.cli import main

    def cli(*args: str) -> None:
        result = CliRunner().invoke(main, [*args, "--store", shared_url])
        assert result.exit_code == 0, result.output

    from liveroom.store import LogPolicy, open_store

    await asyncio.to_thread(cli, "mute", ROOM, "early", "--for", "1m")
    probe = open_store(shared_url, LogPolicy(), FakeClock())
    try:  # no node delivers: nothing kept, nothing marked
        assert (await probe.outbox.waiting(), await probe.outbox.marked(2**62, 10)) == (0, [])
    finally:
        await probe.close()
    ledger, clock = Ledger(), FakeClock(time.time())
    async with receiving(ledger, free_port()) as hook, \
            running_node(shared_url, clock=clock, **hooked(hook)) as node:
        await call(session, "POST", f"{node.url}/v1/admin/rooms/{ROOM}/start")
        await ledger.wait(lambda: len(ledger.events) == 1)  # the lease is the node's
        await asyncio.to_thread(cli, "mute", ROOM, "mal", "--for", "1m", "--reason", "spam")
        await asyncio.to_thread(cli, "vip", "pin", ROOM, "vip")
        await asyncio.to_thread(cli, "room", "end", ROOM)
        await clock.advance(max(SWEEP_EVERY, SWEEP_GRACE_MS / 1000) + 1)
        await ledger.wait(lambda: len(ledger.events) == 4)
    assert sorted(e["type"] for e in ledger.events.values()) == sorted(
        ["broadcast.started", "uid.muted", "room.sect_changed", "broadcast.ended"])
    (muted,) = ledger.of("uid.muted")
    assert (muted["uid"], muted["reason"], muted["by"]) == ("mal", "spam", "admin")
    (ended,) = ledger.of("broadcast.ended")
    assert (ended["broadcast"], ended["gifts"]) == (1, 0)
    assert (ledger.repeats, ledger.refused) == (0, 0)


async def failed_at_least(session: aiohttp.ClientSession, url: str,
                          count: int) -> dict[str, Any]:
    """The failed list at ``url`` once it holds ``count`` events or more."""
    async with asyncio.timeout(WAIT):
        while (doc := await call(session, "GET", url))["count"] < count:
            await asyncio.sleep(0.05)
    return doc


async def test_given_up_after_retry_for_then_replayed(session: aiohttp.ClientSession,
                                                      redis_url: str) -> None:
    ledger = Ledger()
    ledger.status = 500
    async with receiving(ledger, free_port()) as hook, \
            running_node(redis_url, **hooked(hook, webhook_retry_for=0.4)) as node:
        await mutes(session, node.url, 2)
        failed_url = f"{node.url}/v1/admin/webhooks/failed"
        doc = await failed_at_least(session, failed_url, 2)
        assert ledger.events == {}
        assert [(f["type"], f["room"], f["why"]) for f in doc["failed"]] == \
            [("uid.muted", ROOM, "500")] * 2
        ids = [f["id"] for f in doc["failed"]]
        assert [f["event"]["id"] for f in doc["failed"]] == ids
        env = clean_env(LIVEROOM_URL=node.url, LIVEROOM_ADMIN_TOKEN=ADMIN)
        async with liveroom_process("webhooks", "failed", env=env) as proc:
            out, err = await proc.communicate()
        lines = out.decode().splitlines()
        assert (proc.returncode, lines[0]) == (0, "2 events given up"), err
        assert [line.split()[0] for line in lines[1:]] == ids
        assert all("(500)  uid.muted room hooked-room" in line for line in lines[1:])
        ledger.status = 200
        async with liveroom_process("webhooks", "replay", ids[0], "ev_nothere",
                                    env=env) as proc:
            out, err = await proc.communicate()
        assert (proc.returncode, out.decode()) == (0, "1 events replayed\n"), err
        assert "ev_nothere: not in the failed list" in err.decode()
        await ledger.wait(lambda: list(ledger.events) == ids[:1])
        replayed = await call(session, "POST", f"{node.url}/v1/admin/webhooks/replay")
        assert replayed == {"replayed": ids[1:], "count": 1}
        await ledger.wait(lambda: sorted(ledger.events) == sorted(ids))
        assert (await call(session, "GET", failed_url))["count"] == 0
        metrics = await (await session.get(f"{node.url}/metrics",
                                           headers=ADMIN_HEADERS)).text()
    assert "liveroom_webhook_failed_total 2.0" in metrics
    assert "liveroom_webhook_delivered_total 2.0" in metrics


async def test_a_replayed_event_is_retried_anew_before_it_is_given_up_again(
        session: aiohttp.ClientSession, redis_url: str) -> None:
    """Replayed with the receiver still failing, an event gets its retries
    again (--webhook-retry-for from the replay): it was given up after one
    attempt, its action's window long past."""
    ledger = Ledger()
    ledger.status = 500
    async with receiving(ledger, free_port()) as hook, \
            running_node(redis_url, **hooked(hook, webhook_retry_for=0.6)) as node:
        await mutes(session, node.url, 1)
        failed_url = f"{node.url}/v1/admin/webhooks/failed"
        await failed_at_least(session, failed_url, 1)
        posts = ledger.posts  # given up: the action's window is past
        replayed = await call(session, "POST", f"{node.url}/v1/admin/webhooks/replay")
        assert replayed["count"] == 1
        await failed_at_least(session, failed_url, 1)
        assert ledger.posts - posts >= 2  # retried after its first refusal


async def test_a_replay_reads_the_thousand_ids_its_document_allows(
        session: aiohttp.ClientSession, redis_url: str) -> None:
    """1 000 ids of the longest (what the document allows) are read and
    answered; a body past :data:`REPLAY_BODY_MAX` is refused with 413. The
    API's fuzz found the body bounded by a send's (about 5 KB): 700 ids were
    refused as too large."""
    ids = [f"ev_{n:0{EVENT_ID_MAX - 3}d}" for n in range(FAILED_LIST_MAX)]
    assert len(orjson.dumps({"ids": ids})) > 5 * 1024
    async with running_node(redis_url) as node:
        url = f"{node.url}/v1/admin/webhooks/replay"
        assert await call(session, "POST", url, json={"ids": ids}) == \
            {"replayed": [], "count": 0}
        doc = await call(session, "POST", url, json={"ids": ["x" * REPLAY_BODY_MAX]},
                         expect=413)
        assert doc["error"] == "too_large"


async def test_the_node_delivering_is_killed_and_another_takes_over(
        session: aiohttp.ClientSession, shared_url: str) -> None:
    """Two real ``liveroom serve`` processes; the receiver holds its answers
    (so the deliverer has read events it has not finished) until the
    delivering process is killed (SIGKILL: no lease given back); the other
    takes the lease over within ``--webhook-lease`` and delivers all."""
    ledger, port = Ledger(), free_port()
    hook = f"http://127.0.0.1:{port}/events"
    args = ("--store", shared_url, "--webhook", hook, "--webhook-secret", SECRET,
            "--webhook-lease", "1", "--webhook-retry-for", "1h")
    with serve(*args) as (one_url, one), serve(*args) as (two_url, two):
        await mutes(session, one_url, 15)
        await mutes(session, two_url, 15, first=15)
        holder = None
        async with asyncio.timeout(WAIT):
            while holder is None:
                for url, proc in ((one_url, one), (two_url, two)):
                    state = await call(session, "GET", f"{url}/healthz", headers={})
                    if state["webhooks"]["delivering"] and state["webhooks"]["held"]:
                        holder = (url, proc)
                await asyncio.sleep(0.05)
        os.kill(holder[1].pid, signal.SIGKILL)
        holder[1].wait(timeout=10)
        async with receiving(ledger, port):
            await ledger.wait(lambda: len(ledger.events) == 30)
        survivor = two_url if holder[0] == one_url else one_url
        state = await call(session, "GET", f"{survivor}/healthz", headers={})
        assert state["webhooks"]["delivering"]
    uids = sorted(int(e["uid"][1:]) for e in ledger.of("uid.muted"))
    assert uids == list(range(30))  # 0 lost of 30


async def test_a_takeover_the_store_failed_is_tried_again(
        session: aiohttp.ClientSession, redis_url: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The node that gets the lease takes over what the one before had read;
    when the store fails that, it tries again at its next turn (it counted
    itself the deliverer at once, never tried again, and those events were
    never delivered)."""
    from liveroom.errors import StoreUnavailable
    from liveroom.store.redis.outbox import RedisOutbox

    ledger, port = Ledger(), free_port()
    hook = f"http://127.0.0.1:{port}/events"
    settings = hooked(hook, webhook_lease=1, webhook_retry_for=3600)
    async with running_node(redis_url, **settings) as one:
        await mutes(session, one.url, 5)
        async with asyncio.timeout(WAIT):  # read and held, the receiver down
            while not (one.node.webhooks and one.node.webhooks.state["held"]):
                await asyncio.sleep(0.05)
    take_over = RedisOutbox.take_over
    failed = 0

    async def once_failing(self: RedisOutbox, holder: str, count: int) -> Any:
        nonlocal failed
        if not failed:
            failed += 1
            raise StoreUnavailable("the takeover's round trip timed out")
        return await take_over(self, holder, count)

    monkeypatch.setattr(RedisOutbox, "take_over", once_failing)
    async with receiving(ledger, port), running_node(redis_url, **settings):
        await ledger.wait(lambda: len(ledger.events) == 5)
    assert failed == 1


# --- the rules ----------------------------------------------------------------------------


def test_backoff_doubles_up_to_its_cap_with_jitter() -> None:
    assert [backoff(n, 1.0) for n in (1, 2, 3, 4)] == [0.5, 1.0, 2.0, 4.0]
    assert backoff(1, 0.0) == 0.25
    assert backoff(40, 1.0) == backoff(1000, 1.0) == BACKOFF_MAX


@pytest.mark.parametrize(("given", "problem"), [
    ({"webhook": "http://127.0.0.1:9/events"}, "webhooks need webhook_secret"),
    ({"webhook": "http://127.0.0.1:9/events", "webhook_secret": "short"},
     "webhook_secret must have at least 32 bytes"),
    ({"webhook": "ftp://127.0.0.1/events", "webhook_secret": SECRET},
     "webhook must be an http:// or https:// URL"),
    ({"webhook_retry_for": "soon"}, "is not a duration"),
])
def test_bad_webhook_settings_are_refused_at_start(given: dict[str, Any], problem: str) -> None:
    settings, found = settings_from(given)
    assert settings is None or found
    assert any(problem in str(p) for p in found), found


def test_the_retry_window_takes_a_duration_and_the_hook_the_webhook_secret() -> None:
    settings, found = settings_from({"webhook_retry_for": "1h30m"})
    assert not found
    assert settings is not None
    assert settings.webhook_retry_for == 5400
    assert Settings().webhook_retry_for == 86_400
    hooked_node = Settings(send_hook="http://127.0.0.1:9/hook", webhook_secret=SECRET)
    assert hooked_node.hook_secret == SECRET
    with pytest.raises(ConfigError, match="send_hook_secret or webhook_secret"):
        Settings(send_hook="http://127.0.0.1:9/hook")


async def test_the_example_backend_takes_the_events_once_each(
        session: aiohttp.ClientSession) -> None:
    app = example_backend(SECRET)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        hook = f"http://127.0.0.1:{port}/webhooks"
        async with running_node(**hooked(hook)) as node:
            await mutes(session, node.url, 3)
            taken = app[EXAMPLE_EVENTS]
            async with asyncio.timeout(WAIT):
                while len(taken) < 3:
                    await asyncio.sleep(0.02)
            event = next(iter(taken.values()))
            body = orjson.dumps(event)
            async with session.post(hook, data=body, headers={
                    HEADER: sign(SECRET, body, int(time.time()))}) as resp:
                assert resp.status == 200  # a repeat: answered, not taken again
            async with session.post(hook, data=body, headers={
                    HEADER: sign(SECRET, body, int(time.time()) - 400)}) as resp:
                assert resp.status == 401  # an old signature: refused
    finally:
        await runner.cleanup()
    assert sorted(e["uid"] for e in taken.values()) == ["u0", "u1", "u2"]
