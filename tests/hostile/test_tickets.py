"""Who is speaking: signed tickets, tried the way a hostile client would.

Every attack is a request over a real socket to a node in ``ticket`` mode, on
both engines and on both paths that serve polls and sends (the front, and
aiohttp on a connection the front handed over), with the answer expected.
"Nothing stored" is checked through the server itself: after the attacks a
good listener and a good sender use the room, and the room's messages and
members are theirs alone. Expiry runs on the node's fake clock.
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
import jwt
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from support import (
    ADMIN,
    PUBLISHER,
    SHARED_SECRET,
    Running,
    clean_env,
    read_response,
    running_node,
    until,
)

from liveroom.cli import main
from liveroom.clock import FakeClock
from liveroom.errors import Unauthorized
from liveroom.settings import Settings
from proxy.tickets import Tickets, mint

KEY = "ticket-key-0123456789abcdef-0001"
OLD = "ticket-key-0123456789abcdef-old0"
NEW = "ticket-key-0123456789abcdef-new0"
WRONG = "someone-elses-key-0123456789abcd"
ROOM = "stage"


def b64(doc: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(doc).encode()).rstrip(b"=").decode()


def alg_none(uid: str, exp: float) -> str:
    """A token that says "no signature needed", crafted by hand."""
    return f"{b64({'alg': 'none', 'typ': 'JWT'})}.{b64({'sub': uid, 'exp': int(exp)})}."


@dataclass
class Client:
    """Requests to a node over the front (a new connection each) or over
    aiohttp (one keep-alive connection whose first request was not ours)."""

    session: aiohttp.ClientSession
    node: Running

    async def poll(self, room: str = ROOM, bearer: str | None = None,
                   **params: Any) -> tuple[int, dict[str, Any]]:
        """A poll with ``bearer`` in its header; ``ticket=`` is the parameter."""
        headers = {"Authorization": f"Bearer {bearer}"} if bearer is not None else {}
        async with self.session.get(f"{self.node.url}/v1/rooms/{room}/poll",
                                    params={"timeout": 1, **params}, headers=headers) as r:
            return r.status, await r.json()

    async def send(self, body: dict[str, Any], room: str = ROOM,
                   token: str | None = None) -> tuple[int, dict[str, Any]]:
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        async with self.session.post(f"{self.node.url}/v1/rooms/{room}/messages", json=body,
                                     headers=headers) as r:
            return r.status, await r.json()

    async def get(self, path: str, token: str | None = None,
                  **params: Any) -> tuple[int, dict[str, Any]]:
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        async with self.session.get(f"{self.node.url}{path}", params=params,
                                    headers=headers) as r:
            return r.status, await r.json()


@pytest.fixture(params=["front", "aiohttp"])
def path(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@asynccontextmanager
async def ticket_node(engine_url: str, path: str, clock: FakeClock,
                      keys: tuple[str, ...] = (KEY,), **overrides: Any
                      ) -> AsyncIterator[tuple[Running, Client]]:
    """A node in ``ticket`` mode and a client of it on ``path``."""
    async with running_node(engine_url, clock, auth="ticket", ticket_keys=keys,
                            **overrides) as node:
        if path == "front":
            connector = aiohttp.TCPConnector(force_close=True)
        else:
            connector = aiohttp.TCPConnector(limit=1)
        async with aiohttp.ClientSession(connector=connector) as session:
            if path == "aiohttp":
                async with session.get(f"{node.url}/healthz") as resp:
                    assert resp.status == 200
                # The front gave its connection to aiohttp: it serves the rest.
                assert not node.node.proxy.front.connections
            yield node, Client(session, node)


async def room_is_theirs(node: Running, clock: FakeClock, client: Client) -> None:
    """After the attacks: a good listener and a good sender use the room; its
    messages and its members are theirs alone (nothing refused was stored,
    held or counted)."""
    witness = mint(KEY, "witness", rooms=[ROOM], now=clock.time())
    status, sent = await client.send({"body": "good"}, token=witness)
    assert status == 201, sent
    status, answer = await client.poll(bearer=witness, recent=100)
    assert status == 200, answer
    assert [(m["uid"], m["body"]) for m in answer["messages"]] == [("witness", "good")]
    assert sent["seq"] == 1  # no refused send took a seq

    async def counted() -> bool:
        status, doc = await client.get(f"/v1/rooms/{ROOM}/online", token=ADMIN)
        return status == 200 and doc["online"] >= 1

    await until(clock, counted)
    status, doc = await client.get(f"/v1/rooms/{ROOM}/online", token=ADMIN)
    assert doc["members"] == ["witness"]


async def follow(client: Client, bearer: str, first: dict[str, Any],
                 count: int) -> list[dict[str, Any]]:
    """Poll on from ``first``'s cursors until ``count`` messages came."""
    received: list[dict[str, Any]] = []
    answer = first
    async with asyncio.timeout(10):
        while len(received) < count:
            status, answer = await client.poll(bearer=bearer, epoch=answer["epoch"],
                                               seq=answer["seq"], iseq=answer["iseq"],
                                               ctx=answer["ctx"])
            assert status == 200, answer
            received += answer["important"] + answer["messages"]
    return received


# -- the ticket suite: every bad ticket is a 401 and leaves nothing ----------------

def bad_tickets(now: float) -> dict[str, str]:
    return {
        "expired": mint(KEY, "mallory", rooms=[ROOM], ttl=60, now=now - 3600),
        "wrong key": mint(WRONG, "mallory", rooms=[ROOM], now=now),
        "wrong room": mint(KEY, "mallory", rooms=["elsewhere"], now=now),
        "alg none": alg_none("mallory", now + 3600),
        "garbage": "not.a.ticket",
        "sub not a uid": mint(KEY, "mal lory", now=now),
    }


BAD = ["expired", "wrong key", "wrong room", "alg none", "garbage", "sub not a uid"]


@pytest.mark.parametrize("attack", BAD)
async def test_a_bad_ticket_is_refused_and_stores_nothing(
        engine_url: str, path: str, fake_clock: FakeClock, attack: str) -> None:
    async with ticket_node(engine_url, path, fake_clock) as (node, client):
        ticket = bad_tickets(fake_clock.time())[attack]
        for _ in range(3):
            status, doc = await client.poll(bearer=ticket)
            assert status == 401, doc
            assert doc["error"] == "unauthorized"
            status, doc = await client.poll(bearer=ticket, uid="mallory")
            assert status == 401, doc
            status, doc = await client.poll(ticket=ticket)
            assert status == 401, doc
            status, doc = await client.send({"body": "spam"}, token=ticket)
            assert status == 401, doc
            status, doc = await client.send({"body": "spam", "important": True}, token=ticket)
            assert status == 401, doc
        assert node.node.proxy.held_polls() == 0
        await room_is_theirs(node, fake_clock, client)


async def test_a_key_rotated_out_is_refused(engine_url: str, path: str,
                                            fake_clock: FakeClock) -> None:
    # The node was started with the new key only: tickets of the old one are void.
    async with ticket_node(engine_url, path, fake_clock, keys=(NEW,)) as (_node, client):
        old = mint(OLD, "alice", rooms=[ROOM], now=fake_clock.time())
        assert (await client.poll(bearer=old))[0] == 401
        assert (await client.send({"body": "hi"}, token=old))[0] == 401
        new = mint(NEW, "alice", rooms=[ROOM], now=fake_clock.time())
        assert (await client.poll(bearer=new))[0] == 200


async def test_both_keys_verify_while_rotating(engine_url: str, path: str,
                                               fake_clock: FakeClock) -> None:
    async with ticket_node(engine_url, path, fake_clock, keys=(NEW, OLD)) as (_node, client):
        for key in (NEW, OLD):
            ticket = mint(key, "alice", now=fake_clock.time())
            assert (await client.poll(bearer=ticket))[0] == 200


async def test_a_uid_other_than_the_tickets_is_refused(engine_url: str, path: str,
                                                      fake_clock: FakeClock) -> None:
    async with ticket_node(engine_url, path, fake_clock) as (node, client):
        alice = mint(KEY, "alice", rooms=[ROOM], now=fake_clock.time())
        status, doc = await client.poll(bearer=alice, uid="host")
        assert status == 401
        assert "uid mismatch" in doc["message"]
        status, doc = await client.send({"uid": "host", "body": "I am the host"}, token=alice)
        assert status == 401
        assert "uid mismatch" in doc["message"]
        await room_is_theirs(node, fake_clock, client)


async def test_made_up_uids_are_refused(engine_url: str, path: str,
                                        fake_clock: FakeClock) -> None:
    # The finding: 500 sends from made-up uids accepted, 1 200 made-up listeners
    # counted online. Without a ticket none of them gets in.
    async with ticket_node(engine_url, path, fake_clock) as (node, client):
        sends = [client.send({"uid": f"fake{i}", "body": i}) for i in range(50)]
        polls = [client.poll(uid=f"ghost{i}") for i in range(50)]
        answers = await asyncio.gather(*sends, *polls)
        assert {status for status, _ in answers} == {401}
        assert all(doc["error"] == "unauthorized" for _, doc in answers)
        await room_is_theirs(node, fake_clock, client)


# -- a good ticket -------------------------------------------------------------------

async def test_a_good_ticket_names_the_uid(engine_url: str, path: str,
                                           fake_clock: FakeClock) -> None:
    async with ticket_node(engine_url, path, fake_clock) as (_node, client):
        alice = mint(KEY, "alice", rooms=[ROOM, "other"], now=fake_clock.time())
        status, first = await client.poll(bearer=alice)
        assert status == 200, first
        # The same uid named again is fine.
        assert (await client.send({"uid": "alice", "body": 1}, token=alice))[0] == 201
        assert (await client.send({"body": 2}, token=alice))[0] == 201
        received = await follow(client, alice, first, 2)
        assert [(m["uid"], m["body"]) for m in received] == [("alice", 1), ("alice", 2)]
        # Where no header can be set (EventSource, img): the ticket parameter.
        status, doc = await client.poll(ticket=alice, uid="alice")
        assert status == 200, doc


async def test_important_messages_need_the_publish_right(engine_url: str, path: str,
                                                         fake_clock: FakeClock) -> None:
    async with ticket_node(engine_url, path, fake_clock) as (_node, client):
        now = fake_clock.time()
        viewer = mint(KEY, "viewer", rooms=[ROOM], now=now)
        host = mint(KEY, "host", rooms=[ROOM], publish=True, now=now)
        status, first = await client.poll(bearer=viewer)
        assert status == 200, first
        status, doc = await client.send({"body": "gift", "important": True}, token=viewer)
        assert status == 403, doc
        status, doc = await client.send({"body": "co-host", "important": True}, token=host)
        assert status == 201, doc
        # The backend's publisher token speaks for whom its body names.
        status, doc = await client.send({"uid": "system", "body": "big gift",
                                         "important": True}, token=PUBLISHER)
        assert status == 201, doc
        status, doc = await client.send({"body": "whose?", "important": True},
                                        token=PUBLISHER)
        assert status == 400, doc
        received = await follow(client, viewer, first, 2)
        important = [(m["uid"], m["body"]) for m in received if m["important"]]
        assert important == [("host", "co-host"), ("system", "big gift")]


async def test_member_lists_need_a_ticket_for_the_room(engine_url: str, path: str,
                                                       fake_clock: FakeClock) -> None:
    async with ticket_node(engine_url, path, fake_clock) as (_node, client):
        now = fake_clock.time()
        here = mint(KEY, "bob", rooms=[ROOM], now=now)
        there = mint(KEY, "bob", rooms=["elsewhere"], now=now)
        anywhere = mint(KEY, "bob", now=now)  # good for every room, naming none
        online = f"/v1/rooms/{ROOM}/online"
        assert (await client.get(online))[0] == 401
        assert (await client.get(online, token=there))[0] == 403
        status, doc = await client.get(online, token=anywhere)
        assert (status, doc["error"]) == (403, "forbidden")
        assert "names this room" in doc["message"]
        assert (await client.get(online, token=PUBLISHER))[0] == 401
        assert (await client.get(online, token=here))[0] == 200
        assert (await client.get(online, ticket=here))[0] == 200
        assert (await client.get(online, token=ADMIN))[0] == 200
        # Room stats stay public.
        assert (await client.get(f"/v1/rooms/{ROOM}/stats"))[0] == 200


async def test_open_mode_is_unchanged(engine_url: str, path: str,
                                      fake_clock: FakeClock) -> None:
    async with running_node(engine_url, fake_clock) as node, \
            aiohttp.ClientSession() as session:
        client = Client(session, node)
        assert (await client.send({"uid": "anyone", "body": 1}))[0] == 201
        assert (await client.poll(uid="anyone"))[0] == 200
        assert (await client.get(f"/v1/rooms/{ROOM}/online"))[0] == 200
        assert (await client.poll())[0] == 400  # the uid is the request's to give


# -- the cache --------------------------------------------------------------------------

async def test_a_poll_with_a_known_ticket_is_not_verified_again(
        engine_url: str, path: str, fake_clock: FakeClock) -> None:
    async with ticket_node(engine_url, path, fake_clock) as (node, client):
        tickets = node.node.proxy.tickets
        assert tickets is not None
        alice = mint(KEY, "alice", rooms=[ROOM], ttl=60, now=fake_clock.time())
        assert (await client.poll(bearer=alice))[0] == 200
        assert tickets.decodes == 1
        for _ in range(5):
            assert (await client.poll(bearer=alice))[0] == 200
            assert (await client.send({"body": "x"}, token=alice))[0] == 201
        assert tickets.decodes == 1
        # The cached claims still say which rooms: another room is refused,
        # to a poll and to a send (found by its header as it came).
        assert (await client.poll(room="other", bearer=alice))[0] == 401
        assert (await client.send({"body": "x"}, room="other", token=alice))[0] == 401
        # The same ticket in a header written otherwise is the same ticket.
        headers = {"Authorization": f"bearer  {alice} "}
        async with client.session.post(f"{node.url}/v1/rooms/{ROOM}/messages",
                                       json={"body": "y"}, headers=headers) as resp:
            assert resp.status == 201
        assert tickets.decodes == 1
        # Cached, yet expired: refused once its exp (+ leeway) passed.
        await fake_clock.advance(60 + tickets.ticket_leeway + 1)
        status, doc = await client.poll(bearer=alice)
        assert status == 401
        assert "expired" in doc["message"]
        assert (await client.send({"body": "late"}, token=alice))[0] == 401


def test_expiry_honours_the_leeway_on_the_injected_clock(fake_clock: FakeClock) -> None:
    tickets = Tickets([KEY], fake_clock, ticket_leeway=5)
    ticket = mint(KEY, "alice", ttl=10, now=fake_clock.time())
    uncached = mint(KEY, "alice", ttl=10, now=fake_clock.time() + 0.5)
    assert tickets.verify(ticket, "r") == "alice"
    fake_clock._wall += 14  # exp + 4 s: within the leeway
    assert tickets.verify(ticket, "r") == "alice"
    fake_clock._wall += 2
    with pytest.raises(Unauthorized, match="expired"):
        tickets.verify(ticket, "r")
    with pytest.raises(Unauthorized, match="expired"):
        tickets.verify(uncached, "r")


def test_a_ticket_not_valid_yet_is_refused(fake_clock: FakeClock) -> None:
    import jwt

    tickets = Tickets([KEY], fake_clock, ticket_leeway=5)
    now = fake_clock.time()
    early = jwt.encode({"sub": "a", "exp": int(now + 100), "nbf": int(now + 60)}, KEY,
                       algorithm="HS256")
    with pytest.raises(Unauthorized, match="not valid yet"):
        tickets.verify(early, "r")


def test_the_cache_is_bounded(fake_clock: FakeClock) -> None:
    tickets = Tickets([KEY], fake_clock, cache_max=3)
    minted = [mint(KEY, f"u{i}", now=fake_clock.time()) for i in range(5)]
    for ticket in minted:
        tickets.verify(ticket, "r")
    assert tickets.decodes == 5
    tickets.verify(minted[-1], "r")  # still cached
    assert tickets.decodes == 5
    tickets.verify(minted[0], "r")  # was dropped: verified again
    assert tickets.decodes == 6


@pytest.mark.parametrize(("claims", "says"), [
    ({"sub": "a"}, "'exp'"),
    ({"exp": 2_000_000_000}, "'sub'"),
    ({"sub": "a", "exp": "tomorrow"}, "exp"),
    ({"sub": 7, "exp": 2_000_000_000}, "malformed"),
    ({"sub": "a", "exp": 2_000_000_000, "rooms": "stage"}, "rooms"),
    ({"sub": "a", "exp": 2_000_000_000, "rooms": [1]}, "rooms"),
    ({"sub": "a", "exp": 2_000_000_000, "publish": "yes"}, "publish"),
])
def test_malformed_claims_are_refused(fake_clock: FakeClock, claims: dict[str, Any],
                                      says: str) -> None:
    import jwt

    with pytest.raises(Unauthorized, match=says):
        Tickets([KEY], fake_clock).verify(jwt.encode(claims, KEY, algorithm="HS256"), "r")


def test_only_hs256_is_accepted(fake_clock: FakeClock) -> None:
    import jwt

    tickets = Tickets([KEY, KEY * 2], fake_clock)
    exp = int(fake_clock.time() + 60)
    for alg in ("HS384", "HS512"):
        signed = jwt.encode({"sub": "a", "exp": exp}, KEY * 2, algorithm=alg)
        with pytest.raises(Unauthorized, match="HS256"):
            tickets.verify(signed, "r")
    with pytest.raises(Unauthorized):
        tickets.verify(alg_none("a", exp), "r")


_ALPHABET = st.sampled_from("ABCDEFabcdef0123456789-_.=+/ \x00é")


@given(data=st.data())
def test_any_mangled_ticket_is_refused_never_a_crash(data: st.DataObject) -> None:
    clock = FakeClock()
    tickets = Tickets([KEY], clock)
    good = mint(KEY, "alice", rooms=["r"], now=clock.time())
    where = data.draw(st.integers(0, len(good)))
    cut = data.draw(st.integers(0, 5))
    insert = data.draw(st.text(_ALPHABET, max_size=5))
    mangled = good[:where] + insert + good[where + cut:]
    try:
        uid = tickets.verify(mangled, "r")
    except Unauthorized:
        return
    # Only a change that leaves the token's bytes meaning the same can pass
    # (base64's unused low bits in a last character, say).
    assert uid == "alice"


def _pyjwt_payload(token: str, keys: list[str]) -> dict[str, Any] | None:
    """What PyJWT makes of ``token`` as Tickets asks it (None: refused)."""
    for key in keys:
        try:
            payload: dict[str, Any] = jwt.decode(token, key, algorithms=["HS256"], options={
                "verify_exp": False, "verify_nbf": False, "verify_iat": False,
                "require": ["exp", "sub"]})
            return payload
        except jwt.InvalidSignatureError:
            continue
        except jwt.PyJWTError:
            return None
    return None


_HEADERS = st.sampled_from([
    {"alg": "HS256", "typ": "JWT"}, {"typ": "JWT", "alg": "HS256"}, {"alg": "HS256"},
    {"alg": "HS256", "typ": "JWT", "kid": 7}, {"alg": "HS256", "crit": ["x"]},
    {"alg": "HS512", "typ": "JWT"}, {"alg": "none"}, {"typ": "JWT"}])
_CLAIM_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                          st.floats(allow_nan=False), st.text(max_size=5),
                          st.lists(st.text(max_size=3), max_size=2))
_CLAIMS = st.dictionaries(
    st.sampled_from(["sub", "exp", "iat", "nbf", "rooms", "publish", "aud", "jti", "iss",
                     "x"]), _CLAIM_VALUES, max_size=6)


@settings(max_examples=1000, deadline=None)
@given(header=_HEADERS, claims=_CLAIMS, signer=st.sampled_from([KEY, OLD, WRONG]),
       compact=st.booleans(), tail=st.sampled_from(["", "=", "==", "A", "."]),
       keys=st.sampled_from([[KEY], [OLD, KEY], [KEY, OLD]]))
def test_the_fast_check_accepts_only_what_pyjwt_accepts_and_reads_it_alike(
        header: dict[str, Any], claims: dict[str, Any], signer: str, compact: bool,
        tail: str, keys: list[str]) -> None:
    """A ticket's first verification skips PyJWT when it can vouch for the
    ticket itself (:meth:`Tickets._plain`): whatever it accepts, PyJWT
    accepts with the same payload; tickets as backends mint them take it."""
    def part(doc: dict[str, Any]) -> str:
        text = json.dumps(doc, separators=(",", ":") if compact else None)
        return base64.urlsafe_b64encode(text.encode()).rstrip(b"=").decode()

    signing = f"{part(header)}.{part(claims)}"
    signature = jwt.api_jws.base64url_encode(
        hmac.digest(signer.encode(), signing.encode(), "sha256")).decode()
    token = f"{signing}.{signature}{tail}"
    fast = Tickets(keys, FakeClock())._plain(token)
    if fast is not None:
        assert fast == _pyjwt_payload(token, keys)
    if signer in keys:
        minted = mint(signer, "a", rooms=["r"], publish=True, now=2_000_000_000)
        assert Tickets(keys, FakeClock())._plain(minted) is not None
        assert Tickets(keys, FakeClock())._plain(minted) == _pyjwt_payload(minted, keys)


@given(st.text(max_size=300))
def test_any_text_is_refused(text: str) -> None:
    with pytest.raises(Unauthorized):
        Tickets([KEY], FakeClock()).verify(text, "r")


# -- headers, metrics --------------------------------------------------------------------

async def raw_request(node: Running, request: bytes) -> tuple[int, bytes]:
    host, port = node.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(request)
        status, _, body = await read_response(reader)
        return status, body
    finally:
        writer.close()
        await writer.wait_closed()


@pytest.mark.parametrize("auth", ["open", "ticket"])
async def test_a_non_utf8_authorization_header_is_a_401(auth: str,
                                                       fake_clock: FakeClock) -> None:
    bad = b"Authorization: Bearer \xff\xfe\xc3\r\n"
    body = b'{"uid": "a", "body": "hi"}'
    requests = {
        "poll (front)": b"GET /v1/rooms/r/poll?uid=a&timeout=1 HTTP/1.1\r\nHost: t\r\n"
                        + bad + b"\r\n",
        "send (front)": b"POST /v1/rooms/r/messages HTTP/1.1\r\nHost: t\r\n"
                        b"Content-Type: application/json\r\nContent-Length: %d\r\n"
                        % len(body) + bad + b"\r\n" + body,
        "admin (aiohttp)": b"GET /v1/admin/vip HTTP/1.1\r\nHost: t\r\n" + bad + b"\r\n",
        "members (aiohttp)": b"GET /v1/rooms/r/online HTTP/1.1\r\nHost: t\r\n"
                             + bad + b"\r\n",
        "metrics (aiohttp)": b"GET /metrics HTTP/1.1\r\nHost: t\r\n" + bad + b"\r\n",
    }
    if auth == "open":  # an open poll and member list do not read the header
        del requests["poll (front)"], requests["members (aiohttp)"]
    async with running_node("memory", fake_clock, auth=auth,
                            ticket_keys=(KEY,) if auth == "ticket" else (),
                            metrics_token="scrape-token-1") as node:
        for name, request in requests.items():
            status, answer = await raw_request(node, request)
            assert status == 401, (name, answer)
            assert json.loads(answer)["error"] == "unauthorized", name


async def test_metrics_can_need_a_token(fake_clock: FakeClock) -> None:
    async with running_node("memory", fake_clock, metrics_token="scrape-token-1") as node, \
            aiohttp.ClientSession() as session:
        for headers, status in [({}, 401), ({"Authorization": "Bearer nope"}, 401),
                                ({"Authorization": f"Bearer {ADMIN}"}, 401),
                                ({"Authorization": "Bearer scrape-token-1"}, 200)]:
            async with session.get(f"{node.url}/metrics", headers=headers) as resp:
                assert resp.status == status, headers
                if status == 200:
                    assert "liveroom_polls_total" in await resp.text()


# -- settings and the command line ---------------------------------------------------------

@pytest.mark.parametrize(("overrides", "says"), [
    ({"auth": "ticket"}, "at least one ticket key"),
    ({"auth": "ticket", "ticket_keys": ("short",)}, "at least 32 bytes"),
    ({"auth": "jwt"}, "auth must be one of"),
    ({"metrics_token": ""}, "metrics_token"),
])
def test_settings_refuse_what_cannot_work(overrides: dict[str, Any], says: str) -> None:
    with pytest.raises(ValueError, match=says):
        Settings(**overrides)


def serve_refused(*args: str, **env: str) -> str:
    """``python -m liveroom serve ARGS``, which must refuse to start: its stderr."""
    done = subprocess.run([sys.executable, "-m", "liveroom", "serve", "--port", "0", *args],
                          env=clean_env(**env), capture_output=True, text=True, timeout=30)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout == ""
    return " ".join(done.stderr.split())


SECRETS = ("--admin-token", ADMIN, "--publisher-token", PUBLISHER, "--secret", SHARED_SECRET)


def test_redis_without_an_explicit_auth_mode_is_refused(redis_url: str) -> None:
    text = serve_refused("--store", redis_url, *SECRETS)
    assert "--auth ticket --ticket-key KEY" in text
    assert "--auth open" in text
    assert text.count("Error:") == 1


def test_redis_without_tokens_and_secret_is_refused(redis_url: str) -> None:
    text = serve_refused("--store", redis_url, "--auth", "open")
    assert "give --admin-token, --publisher-token, --secret" in text
    text = serve_refused("--store", redis_url, "--secret", "s",
                         LIVEROOM_AUTH="ticket", LIVEROOM_TICKET_KEYS=KEY,
                         LIVEROOM_ADMIN_TOKEN=ADMIN)
    assert "give --publisher-token (or LIVEROOM_PUBLISHER_TOKEN;" in text
    # In the same round: every problem at once, not one per try.
    assert "--secret has 1 bytes" in text
    assert text.count("Error:") == 1


def test_every_problem_comes_in_one_round_the_store_url_first() -> None:
    text = serve_refused("--store", "redis+cluster://127.0.0.1:7000,nohost",
                         "--durable-timeout", "0.01", "--secret", "s",
                         LIVEROOM_AUTH="ticket")
    assert text.count("Error:") == 1
    store = text.index("bad cluster node 'nohost'")
    assert store < text.index("--ticket-key: auth 'ticket' needs at least one ticket key")
    assert store < text.index("give --admin-token, --publisher-token")
    assert store < text.index("--secret has 1 bytes")


@pytest.mark.parametrize(("given", "said"), [
    pytest.param({"--secret": "s"}, "--secret has 1 bytes: give at least 32", id="short-secret"),
    pytest.param({"--admin-token": "a"}, "--admin-token has 1 bytes", id="short-admin"),
    pytest.param({"--publisher-token": "p" * 31}, "--publisher-token has 31 bytes",
                 id="publisher-31"),
    pytest.param({"--publisher-token": ADMIN},
                 "--admin-token and --publisher-token are the same", id="same-tokens"),
])
def test_redis_refuses_weak_or_equal_secrets_saying_which(redis_url: str,
                                                          given: dict[str, str],
                                                          said: str) -> None:
    flags = dict(zip(SECRETS[::2], SECRETS[1::2], strict=True)) | given
    text = serve_refused("--store", redis_url, "--auth", "open",
                         *(x for pair in flags.items() for x in pair))
    assert said in text
    assert text.count("Error:") == 1


def test_ticket_mode_without_keys_is_refused() -> None:
    text = serve_refused("--auth", "ticket")
    assert "--ticket-key" in text


async def test_the_ticket_command_mints_what_the_server_takes(engine_url: str) -> None:
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "liveroom", "ticket", "--uid", "carol", "--room", ROOM,
         "--ttl", "600"],
        env=clean_env(LIVEROOM_TICKET_KEYS=f"{KEY},{OLD}"), capture_output=True, text=True,
        timeout=30)
    assert done.returncode == 0, done.stderr
    ticket = done.stdout.strip()
    clock = FakeClock(start=time.time())  # the command signs on the system clock
    async with ticket_node(engine_url, "front", clock) as (_node, client):
        assert (await client.send({"body": "minted"}, token=ticket))[0] == 201
        status, answer = await client.poll(bearer=ticket)
        assert status == 200, answer
        assert [m["uid"] for m in answer["messages"]] == ["carol"]
        assert (await client.poll(room="other", bearer=ticket))[0] == 401


def test_the_ticket_command_mints_room_scoped_tickets_unless_told_otherwise() -> None:
    runner = CliRunner()
    refused = runner.invoke(main, ["ticket", "--uid", "a", "--key", KEY])
    assert refused.exit_code == 2
    assert "--room ROOM" in refused.output
    assert "--any-room" in refused.output
    scoped = runner.invoke(main, ["ticket", "--uid", "a", "--room", "r1", "--key", KEY])
    assert jwt.decode(scoped.output.strip(), KEY, algorithms=["HS256"])["rooms"] == ["r1"]
    anywhere = runner.invoke(main, ["ticket", "--uid", "a", "--any-room", "--key", KEY])
    assert "rooms" not in jwt.decode(anywhere.output.strip(), KEY, algorithms=["HS256"])
    both = runner.invoke(main, ["ticket", "--uid", "a", "--room", "r", "--any-room",
                                "--key", KEY])
    assert both.exit_code == 2


def test_the_ticket_command_needs_a_key_of_32_bytes() -> None:
    done = subprocess.run([sys.executable, "-m", "liveroom", "ticket", "--uid", "a"],
                          env=clean_env(), capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert "LIVEROOM_TICKET_KEYS" in done.stderr
    done = subprocess.run([sys.executable, "-m", "liveroom", "ticket", "--uid", "a",
                           "--key", "short"], env=clean_env(), capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 2
    assert "32 bytes" in done.stderr
