"""The send hook end to end (``proxy/sends/hook.py``, issue 47 item 1): real
nodes over real sockets, and real backends, aiohttp applications on
loopback ports: the docs' example (``examples/backend.py``: it checks the
signature, masks a word, rejects, holds) and :class:`Backstage`, a backend
the tests steer (it records each call, answers as told, or holds its calls
until released, or fails).
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import math
import re
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import msgpack
import orjson
import pytest
from aiohttp import web
from support import (
    ADMIN,
    ADMIN_HEADERS,
    PUBLISHER,
    SHARED_SECRET,
    Listener,
    clean_env,
    free_port,
    liveroom_process,
    running_node,
)

from liveroom.client.answers import Answer
from liveroom.clock import FakeClock
from liveroom.codec import pack_stored, unpack_stored
from liveroom.errors import ConfigError
from liveroom.model import Entry
from liveroom.ratelimit import RateLimits, parse_windows
from liveroom.settings import Settings
from liveroom.signature import HEADER, verify
from proxy.sends.circuit import Circuit
from proxy.tickets import mint

ROOM = "hooked"
HOOK_SECRET = "send-hook-secret-of-the-tests-0123456789"
TICKET_KEY = "ticket-key-of-the-send-hook-tests-0123456789"
PUBLISHER_HEADERS = {"Authorization": f"Bearer {PUBLISHER}"}
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "backend.py"
TIMEOUT = 0.3
"""The send hook's timeout where a test waits on it."""
LATE_MARGIN = 1.0
"""How much past the timeout a sender may be answered: a loop turn or two
and a loopback round trip, on a machine whose 2 cores are busy with other
work (0.5 s was seen passed there once)."""


def example_backend() -> web.Application:
    """The docs' example backend (examples/backend.py), keyed with HOOK_SECRET."""
    spec = importlib.util.spec_from_file_location("example_backend", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    app: web.Application = module.backend(HOOK_SECRET)
    return app


@asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[str]:
    """``app`` on a free loopback port: its base URL."""
    runner = web.AppRunner(app, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


class Call:
    """One call the backend took."""

    def __init__(self, raw: bytes, signature: str | None) -> None:
        self.raw = raw
        self.signature = signature
        self.messages: list[dict[str, Any]] = orjson.loads(raw)["messages"]


def accept_all(message: dict[str, Any]) -> dict[str, Any]:
    return {"id": message["id"], "action": "accept"}


class Backstage:
    """A backend the tests steer: it records every call, then answers it
    (each message as :attr:`decide` says), fails it (``failing``: 500), or,
    while :attr:`late`, holds it until :attr:`release` is set."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.arrived: asyncio.Queue[Call] = asyncio.Queue()
        self.decide: Callable[[dict[str, Any]], dict[str, Any]] = accept_all
        self.failing = False
        self.late = False
        self.release = asyncio.Event()

    async def hook(self, request: web.Request) -> web.Response:
        call = Call(await request.read(), request.headers.get(HEADER))
        self.calls.append(call)
        self.arrived.put_nowait(call)
        if self.failing:
            return web.json_response({"error": "down for maintenance"}, status=500)
        if self.late:
            await self.release.wait()
        return web.json_response({"results": [self.decide(m) for m in call.messages]})

    def application(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/hook", self.hook)
        return app


@pytest.fixture
async def backstage() -> AsyncIterator[tuple[Backstage, str]]:
    """A steered backend and its hook's URL (its held calls released at the end)."""
    backend = Backstage()
    async with serving(backend.application()) as url:
        try:
            yield backend, f"{url}/hook"
        finally:
            backend.release.set()


@pytest.fixture
async def example_url() -> AsyncIterator[str]:
    """The example backend's hook URL."""
    async with serving(example_backend()) as url:
        yield f"{url}/hook"


def hooked(url: str, **overrides: Any) -> dict[str, Any]:
    """A node's settings for a send hook at ``url``."""
    return {"send_hook": url, "send_hook_secret": HOOK_SECRET, **overrides}


async def post(session: aiohttp.ClientSession, url: str, doc: dict[str, Any], *,
               headers: dict[str, str] | None = None,
               room: str = ROOM) -> tuple[int, dict[str, Any], Mapping[str, str]]:
    async with session.post(f"{url}/v1/rooms/{room}/messages", json=doc,
                            headers=headers or {}) as resp:
        return resp.status, await resp.json(), resp.headers


async def metrics(session: aiohttp.ClientSession, url: str) -> str:
    async with session.get(f"{url}/metrics", headers=ADMIN_HEADERS) as resp:
        assert resp.status == 200
        return await resp.text()


def figure(text: str, name: str, labels: str = "") -> float:
    """A series' value in a /metrics page (0 when absent)."""
    found = re.search(rf"^{re.escape(name + labels)} (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


async def health(session: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    async with session.get(f"{url}/healthz") as resp:
        assert resp.status == 200
        doc: dict[str, Any] = await resp.json()
        return doc


async def held_list(session: aiohttp.ClientSession, url: str) -> list[dict[str, Any]]:
    async with session.get(f"{url}/v1/admin/rooms/{ROOM}/review",
                           headers=ADMIN_HEADERS) as resp:
        assert resp.status == 200
        held: list[dict[str, Any]] = (await resp.json())["held"]
        return held


# -- verdicts -------------------------------------------------------------------------


async def test_a_screened_send_is_posted_signed_then_stored(
        engine_url: str, backstage: tuple[Backstage, str],
        session: aiohttp.ClientSession) -> None:
    backend, url = backstage
    async with running_node(engine_url, secret=SHARED_SECRET, **hooked(url)) as node:
        listener = Listener(session, ROOM, uid="fan")
        status, answer, _ = await post(session, node.url, {"uid": "bob", "body": "hello",
                                                           "client_msg_id": "c-1"})
        assert (status, answer["seq"]) == (201, 1)
        await listener.poll(node.url)
        assert listener.bodies() == ["hello"]
        (call,) = backend.calls
        (message,) = call.messages
        assert isinstance(message.pop("id"), str)
        assert message == {"room": ROOM, "uid": "bob", "kind": "normal", "to": None,
                           "body": "hello", "client_msg_id": "c-1", "address": "127.0.0.1",
                           "claims": None}
        # The backend can tell it is liveroom's, and that nobody changed it.
        assert call.signature is not None
        assert verify(HOOK_SECRET, call.signature, call.raw, time.time())
        assert not verify("another-secret-of-the-same-length-01234", call.signature,
                          call.raw, time.time())
        assert not verify(HOOK_SECRET, call.signature, call.raw.replace(b"hello", b"HELLO"),
                          time.time())
        assert not verify(HOOK_SECRET, call.signature, call.raw, time.time() + 3600)
        assert (await health(session, node.url)) == {"status": "ok", "send_hook": "closed"}


async def test_the_example_backend_masks_rejects_and_holds(
        engine_url: str, example_url: str, session: aiohttp.ClientSession) -> None:
    async with running_node(engine_url, secret=SHARED_SECRET, **hooked(example_url)) as node:
        url = node.url
        fan = Listener(session, ROOM, uid="fan")
        assert (await post(session, url, {"uid": "bob", "body": "darn it"}))[0] == 201
        status, answer, _ = await post(session, url, {"uid": "eve", "body": "buy spam"})
        assert (status, answer) == (403, {"error": "rejected", "message": "no spam here"})
        status, answer, _ = await post(session, url, {"uid": "al", "body": "I want a refund"})
        assert (status, answer) == (202, {"held": "1"})
        assert (await post(session, url, {"uid": "al", "body": "plain"}))[0] == 201
        await fan.poll(url)
        assert [(m["uid"], m["body"], m.get("extra")) for m in fan.received] == [
            ("bob", "**** it", {"masked": 1}), ("al", "plain", None)]
        # The moderators' list of messages shows the extra too; the held one waits.
        async with session.get(f"{url}/v1/admin/rooms/{ROOM}/messages",
                               headers=ADMIN_HEADERS) as resp:
            listed = (await resp.json())["messages"]
        assert [(m["body"], m.get("extra")) for m in listed] == [
            ("**** it", {"masked": 1}), ("plain", None)]
        assert [(h["uid"], h["body"], h["why"]) for h in await held_list(session, url)] == [
            ("al", "I want a refund", "hook: asks for a refund")]
        text = await metrics(session, url)
        verdicts = {v: figure(text, "liveroom_send_hook_messages_total", f'{{verdict="{v}"}}')
                    for v in ("accept", "reject", "hold")}
        assert verdicts == {"accept": 2, "reject": 1, "hold": 1}
        assert figure(text, "liveroom_sends_total", '{outcome="rejected"}') == 1
        assert figure(text, "liveroom_sends_total", '{outcome="held"}') == 1
        assert figure(text, "liveroom_send_hook_calls_total", '{outcome="ok"}') == 4


async def test_a_verdict_whose_writer_escapes_every_emoji_is_taken(
        example_url: str, session: aiohttp.ClientSession) -> None:
    """The example backend answers with Python's json.dumps, which writes an
    emoji as two escapes (12 bytes for 4): a body of a thousand emoji within
    --max-message-bytes came back three times its size, past what the node
    read, and the call failed (the send stored unmasked, a failure for the
    circuit)."""
    async with running_node(secret=SHARED_SECRET, **hooked(example_url)) as node:
        body = "darn " + "\U0001F600" * 1018  # 4 077 bytes of compact JSON
        async with session.post(f"{node.url}/v1/rooms/{ROOM}/messages",
                                data=orjson.dumps({"uid": "bob", "body": body}),
                                headers={"Content-Type": "application/json"}) as resp:
            assert resp.status == 201, await resp.text()
        fan = Listener(session, ROOM, uid="fan")
        await fan.poll(node.url)
        assert [m["body"] for m in fan.received] == ["**** " + "\U0001F600" * 1018]
        text = await metrics(session, node.url)
        assert figure(text, "liveroom_send_hook_calls_total", '{outcome="ok"}') == 1


async def test_a_hook_that_stops_gives_a_call_not_yet_begun_the_failure_policy() -> None:
    """A call's task is made, then the node stops before it ran a step: a
    task cancelled then never runs its body, whose cancellation handler
    gave its sends the failure policy, and its send was never answered."""
    from dataclasses import replace

    from support import BASE

    from liveroom.clock import SystemClock
    from liveroom.metrics import Metrics
    from liveroom.model import NewMessage
    from proxy.sends.hook import SendHook

    hook = SendHook(replace(BASE, **hooked("http://127.0.0.1:9/hook", send_hook_batch=1)),
                    SystemClock(), Metrics())
    await hook.start()
    verdicts: list[Any] = []
    assert hook.ask(ROOM, NewMessage("bob", "hi", False, 0), "192.0.2.7", None,
                    verdicts.append) is None  # a full batch: its call's task is made
    await hook.stop()
    assert [v.fallback for v in verdicts] == ["stopped"]


async def test_a_rewritten_message_and_its_extra_reach_a_listener_on_another_node(
        redis_url: str, example_url: str, session: aiohttp.ClientSession) -> None:
    settings = hooked(example_url, secret=SHARED_SECRET, auth="open")
    async with running_node(redis_url, node_id="a", **settings) as a, \
            running_node(redis_url, node_id="b", **settings) as b:
        fan = Listener(session, ROOM, uid="fan")
        await fan.poll(b.url)
        waiting = asyncio.create_task(fan.poll(b.url, timeout=10))
        body = {"text": "Darn, darn", "color": "red"}
        status, answer, _ = await post(session, a.url, {"uid": "bob", "body": body})
        assert status == 201, answer
        answer = await asyncio.wait_for(waiting, 10)
        (message,) = fan.received
        assert (message["uid"], message["body"], message["extra"]) == (
            "bob", {"text": "****, ****", "color": "red"}, {"masked": 2})
        assert Answer.from_doc(answer).messages[0].extra == {"masked": 2}  # the Python client
        # In msgpack too, and to a first poll of the other node.
        async with session.get(f"{b.url}/v1/rooms/{ROOM}/poll", params={"uid": "mp"},
                               headers={"Accept": "application/msgpack"}) as resp:
            first = msgpack.unpackb(await resp.read())
        assert [(m["body"], m["extra"]) for m in first["messages"]] == [
            ({"text": "****, ****", "color": "red"}, {"masked": 2})]


async def test_a_recalled_message_keeps_no_extra(
        engine_url: str, example_url: str, session: aiohttp.ClientSession) -> None:
    """A tombstone has neither body nor extra (on Redis the recall's script
    reads the stored form, extra and all)."""
    async with running_node(engine_url, secret=SHARED_SECRET, **hooked(example_url)) as node:
        status, answer, _ = await post(session, node.url, {"uid": "bob", "body": "darn"})
        assert status == 201
        async with session.delete(f"{node.url}/v1/rooms/{ROOM}/messages/{answer['seq']}",
                                  headers=ADMIN_HEADERS) as resp:
            assert resp.status == 200, await resp.text()
        first = await Listener(session, ROOM, uid="late").poll(node.url)
        (tombstone,) = first["messages"]
        assert (tombstone["body"], tombstone["recalled"], "extra" in tombstone) == (
            None, True, False)


async def test_the_backends_own_tokened_sends_skip_the_hook(
        engine_url: str, backstage: tuple[Backstage, str],
        session: aiohttp.ClientSession) -> None:
    backend, url = backstage
    backend.failing = True
    async with running_node(engine_url, secret=SHARED_SECRET,
                            **hooked(url, send_hook_failure="reject")) as node:
        for doc in ({"uid": "host", "body": "hi"},
                    {"uid": "host", "body": {"event": "goal"}, "important": True},
                    {"uid": "host", "body": "psst", "to": "al"}):
            status, answer, _ = await post(session, node.url, doc, headers=PUBLISHER_HEADERS)
            assert status == 201, answer
        assert backend.calls == []
        # A viewer's send is screened: the failing backend refuses it.
        status, answer, headers = await post(session, node.url, {"uid": "v", "body": "hi"})
        assert (status, answer["error"], headers["Retry-After"]) == (
            503, "send_hook_unavailable", "1")
        assert len(backend.calls) == 1


async def test_a_tickets_important_and_personal_sends_are_screened_with_its_claims(
        backstage: tuple[Backstage, str], session: aiohttp.ClientSession) -> None:
    backend, url = backstage
    backend.decide = lambda m: {"id": m["id"], "action": "reject", "reason": "not to al"} \
        if m["to"] == "al" else accept_all(m)
    ticket = mint(TICKET_KEY, "bob", rooms=[ROOM], publish=True)
    bob = {"Authorization": f"Bearer {ticket}"}
    async with running_node(auth="ticket", ticket_keys=(TICKET_KEY,),
                            **hooked(url)) as node:
        status, _, _ = await post(session, node.url, {"body": "news", "important": True},
                                  headers=bob)
        assert status == 201
        status, answer, _ = await post(session, node.url, {"body": "psst", "to": "al"},
                                       headers=bob)
        assert (status, answer) == (403, {"error": "rejected", "message": "not to al"})
        status, _, _ = await post(session, node.url, {"uid": "host", "body": "psst",
                                                      "to": "al"}, headers=PUBLISHER_HEADERS)
        assert status == 201
        assert [(m["kind"], m["uid"], m["to"], m["body"]) for c in backend.calls
                for m in c.messages] == [("important", "bob", None, "news"),
                                         ("personal", "bob", "al", "psst")]
        claims = backend.calls[0].messages[0]["claims"]
        assert (claims["sub"], claims["rooms"], claims["publish"]) == ("bob", [ROOM], True)
        assert claims["exp"] > time.time()


# -- a late or failing backend -----------------------------------------------------------


@pytest.mark.parametrize("policy", ["accept", "reject", "hold"])
async def test_a_late_backend_leaves_the_send_to_the_failure_policy_within_the_timeout(
        policy: str, backstage: tuple[Backstage, str],
        session: aiohttp.ClientSession) -> None:
    backend, url = backstage
    backend.late = True
    async with running_node(**hooked(url, send_hook_timeout=TIMEOUT,
                                     send_hook_failure=policy)) as node:
        started = time.monotonic()
        status, answer, headers = await post(session, node.url, {"uid": "bob", "body": "hi"})
        waited = time.monotonic() - started
        assert TIMEOUT * 0.9 <= waited < TIMEOUT + LATE_MARGIN, waited
        if policy == "accept":
            assert (status, answer["seq"]) == (201, 1)
            first = await Listener(session, ROOM, uid="fan").poll(node.url)
            assert [m["body"] for m in first["messages"]] == ["hi"]
        elif policy == "reject":
            assert (status, answer["error"], headers["Retry-After"]) == (
                503, "send_hook_unavailable", "1")
            assert "the backend was late" in answer["message"]
        else:
            assert (status, answer) == (202, {"held": "1"})
            assert [h["why"] for h in await held_list(session, node.url)] == [
                "hook: the backend was late"]
        text = await metrics(session, node.url)
        assert figure(text, "liveroom_send_hook_messages_total", '{verdict="late"}') == 1


async def test_a_failing_backend_opens_the_circuit_and_a_trial_closes_it(
        backstage: tuple[Backstage, str], session: aiohttp.ClientSession,
        caplog: pytest.LogCaptureFixture) -> None:
    backend, url = backstage
    backend.failing = True
    clock = FakeClock(time.time())
    caplog.set_level(logging.INFO, "liveroom.proxy.send_hook")
    async with running_node(clock=clock, **hooked(url, send_hook_trip=2,
                                                  send_hook_cooldown=5.0)) as node:
        for n in range(2):  # each call fails: the sender gets the policy (accept)
            assert (await post(session, node.url, {"uid": "bob", "body": f"m{n}"}))[0] == 201
        assert len(backend.calls) == 2
        assert (await health(session, node.url))["send_hook"] == "open"
        text = await metrics(session, node.url)
        assert figure(text, "liveroom_send_hook_circuit_open") == 1
        assert figure(text, "liveroom_send_hook_circuit_opened_total") == 1
        assert figure(text, "liveroom_send_hook_calls_total", '{outcome="error"}') == 2
        # Open: no call, the policy at once.
        assert (await post(session, node.url, {"uid": "bob", "body": "m2"}))[0] == 201
        assert len(backend.calls) == 2
        assert figure(await metrics(session, node.url), "liveroom_send_hook_messages_total",
                      '{verdict="circuit"}') == 1
        # The backend is back (and rejects everything, to be seen): after the
        # cooldown the next send is the trial, and it closes the circuit.
        backend.failing = False
        backend.decide = lambda m: {"id": m["id"], "action": "reject", "reason": "back"}
        await clock.advance(5.1)
        status, answer, _ = await post(session, node.url, {"uid": "bob", "body": "m3"})
        assert (status, answer["error"]) == (403, "rejected")
        assert len(backend.calls) == 3
        assert (await health(session, node.url))["send_hook"] == "closed"
        assert figure(await metrics(session, node.url), "liveroom_send_hook_circuit_open") == 0
    lines = [r.getMessage() for r in caplog.records if "circuit" in r.getMessage()]
    assert len(lines) == 2, lines
    assert "circuit open after 2 failed calls" in lines[0]
    assert "circuit closed" in lines[1]


async def test_a_trial_whose_call_never_reported_is_lost_and_the_next_send_tries() -> None:
    clock = FakeClock()
    circuit = Circuit(clock, trip=1, cooldown=1.0, trial_timeout=2.0)
    assert circuit.failed()
    assert (circuit.state, circuit.admits()) == ("open", False)
    await clock.advance(1.0)
    assert (circuit.admits(), circuit.state) == (True, "trial")
    assert not circuit.admits()  # one trial at a time
    await clock.advance(2.0)
    assert circuit.admits()  # the first trial never reported
    assert (circuit.failed(), circuit.state) == (False, "open")  # a failed trial: open again
    await clock.advance(1.0)
    assert (circuit.admits(), circuit.passed(), circuit.state) == (True, True, "closed")


async def test_a_wrong_signature_is_refused_by_the_example_and_counts_as_a_failed_call(
        example_url: str, session: aiohttp.ClientSession) -> None:
    async with session.post(example_url, json={"messages": []}) as resp:
        assert resp.status == 401  # unsigned
    async with running_node(**hooked(example_url, send_hook_failure="reject",
                                     send_hook_secret="not-the-backends-secret-0123456789")
                            ) as node:
        status, answer, _ = await post(session, node.url, {"uid": "bob", "body": "hi"})
        assert (status, answer["error"]) == (503, "send_hook_unavailable")
        text = await metrics(session, node.url)
        assert figure(text, "liveroom_send_hook_calls_total", '{outcome="error"}') == 1


# -- batches -------------------------------------------------------------------------------


def odd_rejected_even_shouted(message: dict[str, Any]) -> dict[str, Any]:
    """Sends ``mN``: an odd N is rejected (its body the reason), an even one
    accepted in capitals."""
    if int(message["body"][1:]) % 2:
        return {"id": message["id"], "action": "reject", "reason": message["body"]}
    return {"id": message["id"], "action": "accept", "body": message["body"].upper()}


async def test_sends_arriving_while_a_call_is_in_flight_go_together_in_the_next(
        backstage: tuple[Backstage, str], session: aiohttp.ClientSession) -> None:
    backend, url = backstage
    backend.late = True
    backend.decide = odd_rejected_even_shouted
    async with running_node(**hooked(url, send_hook_timeout=10.0)) as node:
        hook = node.node.proxy.send_hook
        assert hook is not None
        first = asyncio.create_task(post(session, node.url, {"uid": "u0", "body": "m0"}))
        await asyncio.wait_for(backend.arrived.get(), 10)  # the first call is in flight
        sends = [asyncio.create_task(post(session, node.url, {"uid": f"u{n}",
                                                              "body": f"m{n}"}))
                 for n in range(1, 41)]
        async with asyncio.timeout(10):
            while hook.waiting < 40:  # every one waits for the call in flight
                await asyncio.sleep(0.01)
        assert (hook.calls_in_flight, len(backend.calls)) == (1, 1)
        backend.release.set()
        answers = await asyncio.gather(first, *sends)
    assert [len(c.messages) for c in backend.calls] == [1, 40]
    assert [(status, answer.get("message")) for status, answer, _ in answers] == [
        (403, f"m{n}") if n % 2 else (201, None) for n in range(41)]


async def test_a_full_batch_leaves_at_once_within_the_calls_in_flight(
        backstage: tuple[Backstage, str], session: aiohttp.ClientSession) -> None:
    """41 sends make 4 calls: the first alone (nothing in flight), then, while
    it is, a full batch (--send-hook-batch) leaves at once, two calls in
    flight at most (--send-hook-calls), and the rest wait for a call to end;
    each sender gets its own message's verdict."""
    backend, url = backstage
    backend.late = True
    backend.decide = odd_rejected_even_shouted
    async with running_node(**hooked(url, send_hook_batch=16, send_hook_calls=2,
                                     send_hook_timeout=10.0)) as node:
        hook = node.node.proxy.send_hook
        assert hook is not None
        first = asyncio.create_task(post(session, node.url, {"uid": "u0", "body": "m0"}))
        await asyncio.wait_for(backend.arrived.get(), 10)  # the first call is in flight
        sends = [asyncio.create_task(post(session, node.url, {"uid": f"u{n}",
                                                              "body": f"m{n}"}))
                 for n in range(1, 41)]
        async with asyncio.timeout(10):
            while hook.waiting < 24:  # 16 left at once; 24 wait for a call to end
                await asyncio.sleep(0.01)
        await asyncio.wait_for(backend.arrived.get(), 10)  # the full batch's call
        assert (hook.calls_in_flight, hook.waiting, len(backend.calls)) == (2, 24, 2)
        backend.release.set()
        answers = await asyncio.gather(first, *sends)
        stored = await Listener(session, ROOM, uid="fan").poll(node.url, recent=100)
    assert [len(c.messages) for c in backend.calls] == [1, 16, 16, 8]
    for n, (status, answer, _) in enumerate(answers):
        if n % 2:
            assert (status, answer) == (403, {"error": "rejected", "message": f"m{n}"})
        else:
            assert status == 201, answer
    assert sorted(m["body"] for m in stored["messages"]) == sorted(
        f"M{n}" for n in range(0, 41, 2))


async def test_a_screened_send_whose_client_left_is_still_decided_and_stored(
        engine_url: str, backstage: tuple[Backstage, str],
        session: aiohttp.ClientSession) -> None:
    """A send is a write: its client closing while the backend decides
    stops nothing (on memory no task waits for the verdict; over Redis the
    send's task runs to its end), and the verdict is acted on all the same."""
    backend, url = backstage
    backend.late = True
    async with running_node(engine_url, **hooked(url, send_hook_timeout=10.0)) as node:
        host, port = node.url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        body = b'{"uid": "gone", "body": "left early"}'
        writer.write(b"POST /v1/rooms/%s/messages HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                     % (ROOM.encode(), len(body), body))
        await writer.drain()
        await asyncio.wait_for(backend.arrived.get(), 10)  # its call is in flight
        writer.close()
        await writer.wait_closed()
        assert await reader.read() == b""  # closed before any answer
        backend.release.set()
        assert (await post(session, node.url, {"uid": "al", "body": "after"}))[0] == 201
        # The first verdict is acted on once its call ended; over Redis its
        # append may still be on its way when the second send is answered
        # (the two appends race): wait for it.
        async with asyncio.timeout(10):
            while True:
                async with session.get(f"{node.url}/v1/admin/rooms/{ROOM}/messages",
                                       headers=ADMIN_HEADERS) as resp:
                    listed = (await resp.json())["messages"]
                if len(listed) >= 2:
                    break
                await asyncio.sleep(0.02)
        assert sorted((m["uid"], m["body"]) for m in listed) == [("al", "after"),
                                                                 ("gone", "left early")]
        assert len(backend.calls) == 2


async def test_a_sender_over_its_rate_limits_costs_the_backend_no_more_calls(
        backstage: tuple[Backstage, str], session: aiohttp.ClientSession) -> None:
    backend, url = backstage
    async with running_node(rate_limits=RateLimits(parse_windows("2/m")), **hooked(url)) as node:
        statuses = [(await post(session, node.url, {"uid": "bob", "body": f"m{n}"}))[0]
                    for n in range(3)]
        assert statuses == [201, 201, 429]
        assert len(backend.calls) == 3  # the store refused the third, after its call
        for n in range(3, 6):
            status, _, headers = await post(session, node.url, {"uid": "bob",
                                                                "body": f"m{n}"})
            assert (status, 0 < math.ceil(float(headers["Retry-After"])) <= 60) == (429, True)
        assert len(backend.calls) == 3
        assert (await post(session, node.url, {"uid": "al", "body": "hi"}))[0] == 201
        assert len(backend.calls) == 4


async def test_a_screened_send_counts_in_the_new_room_windows_only_when_stored(
        engine_url: str, backstage: tuple[Backstage, str],
        session: aiohttp.ClientSession) -> None:
    """A screened send that creates a room takes its place in the new-room
    windows (before its call on Redis, when its verdict comes on memory);
    one the backend rejects takes none, and a room that exists needs none."""
    backend, url = backstage
    backend.decide = lambda m: {"id": m["id"], "action": "reject" if m["body"] == "no"
                                else "accept"}
    async with running_node(engine_url, rooms_per_uid=parse_windows("1/m"),
                            **hooked(url)) as node:
        async def send(uid: str, room: str, body: str = "hi") -> int:
            return (await post(session, node.url, {"uid": uid, "body": body}, room=room))[0]

        assert await send("bob", "first") == 201
        assert await send("bob", "second") == 429  # over its one new room a minute
        assert await send("bob", "first") == 201  # a room that exists: no window
        assert await send("al", "third", "no") == 403  # rejected: no room, no place
        assert await send("al", "fourth") == 201
        assert await send("al", "fifth") == 429
        assert len(backend.calls) == 6  # every one screened, the refused too


# -- the stored form ----------------------------------------------------------------------------


def test_entries_stored_before_extras_read_as_before_and_pack_the_same() -> None:
    old_room = msgpack.packb(["bob", False, 7, "hi"])
    old_personal = msgpack.packb(["bob", True, 7, "psst", "al"])
    assert pack_stored("bob", False, 7, "hi") == old_room
    assert pack_stored("bob", True, 7, "psst", "al") == old_personal
    assert unpack_stored(1, 0, old_room) == Entry(1, 0, "bob", False, 7, "hi")
    assert unpack_stored(1, 0, old_personal, 2) == Entry(1, 0, "bob", True, 7, "psst", "al", 2)
    with_extra = pack_stored("bob", False, 7, "hi", None, {"k": [1]})
    assert msgpack.unpackb(with_extra) == ["bob", False, 7, "hi", None, {"k": [1]}]
    assert unpack_stored(1, 0, with_extra).extra == {"k": [1]}
    odd = msgpack.packb(["bob", False, 7, "hi", None, "not an object"])
    assert unpack_stored(1, 0, odd).extra is None


async def test_serve_takes_the_hook_from_its_environment_and_says_so(
        example_url: str, session: aiohttp.ClientSession) -> None:
    """A real ``liveroom serve`` given LIVEROOM_SEND_HOOK and its secret in the
    environment: its start line names the hook, and its sends are screened."""
    port = free_port()
    env = clean_env(LIVEROOM_SEND_HOOK=example_url, LIVEROOM_SEND_HOOK_SECRET=HOOK_SECRET,
                    LIVEROOM_SEND_HOOK_FAILURE="hold", LIVEROOM_ADMIN_TOKEN=ADMIN,
                    LIVEROOM_PUBLISHER_TOKEN=PUBLISHER)
    async with liveroom_process("serve", "--port", str(port), env=env) as proc:
        assert proc.stdout is not None
        said = []
        async with asyncio.timeout(30):
            while not said or "stop with Ctrl-C" not in said[-1]:
                line = (await proc.stdout.readline()).decode()
                assert line, "".join(said)
                said.append(line)
        assert f"  send hook: {example_url} (at most 1 s a send; late or failing: hold)\n" in said
        url = f"http://127.0.0.1:{port}"
        status, answer, _ = await post(session, url, {"uid": "eve", "body": "spam"})
        assert (status, answer["error"]) == (403, "rejected")


# -- settings -------------------------------------------------------------------------------


@pytest.mark.parametrize(("given", "refused"), [
    ({"send_hook": "http://127.0.0.1:8090/hook"}, "a send hook needs send_hook_secret"),
    ({"send_hook": "http://127.0.0.1:8090/hook", "send_hook_secret": "short"},
     "send_hook_secret must have at least 32 bytes"),
    ({"send_hook": "ftp://127.0.0.1/hook", "send_hook_secret": HOOK_SECRET},
     "send_hook must be an http:// or https:// URL"),
    ({"send_hook": "127.0.0.1:8090/hook", "send_hook_secret": HOOK_SECRET},
     "send_hook must be an http:// or https:// URL"),
    ({"send_hook": "http://127.0.0.1:8090/hook", "send_hook_secret": HOOK_SECRET,
      "send_hook_failure": "drop"}, "send_hook_failure must be one of accept, reject, hold"),
])
def test_a_send_hook_needs_a_url_and_a_strong_secret(given: dict[str, Any], refused: str) -> None:
    with pytest.raises(ConfigError, match=refused):
        Settings(**given)
    Settings(send_hook="https://backend.internal/hook", send_hook_secret=HOOK_SECRET)
