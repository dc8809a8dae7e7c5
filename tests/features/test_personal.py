"""Personal messages ("to": uid) end to end over real HTTP, on memory and one
Redis (the store's part runs on the cluster too, in test_store_contract), and
the reading rule (liveroom.personal) against a model."""

from __future__ import annotations

import asyncio
from typing import Any

import msgpack
from hypothesis import given, settings
from hypothesis import strategies as st
from support import PUBLISHER, Listener, running_node, send

from liveroom.codec import encode_message
from liveroom.model import Entry
from liveroom.personal import PTS_MASK, Personal, read_personal, retaken
from liveroom.snapshot import Item


async def test_only_its_addressee_gets_it_at_once_and_nobody_else_wakes(
        engine_url: str, session: Any) -> None:
    async with running_node(engine_url) as node:
        a, b = Listener(session, "stage", uid="a"), Listener(session, "stage", uid="b")
        await send(session, node.url, "stage", "hello")
        await a.poll(node.url)
        await b.poll(node.url)
        held_a = asyncio.create_task(a.poll(node.url, timeout=20))
        held_b = asyncio.create_task(b.poll(node.url, timeout=20))
        holds = node.node.proxy.polls.holds
        async with asyncio.timeout(5):
            while holds.count < 2:
                await asyncio.sleep(0.01)
        sent = await send(session, node.url, "stage", {"gift": "rocket"}, to="a")
        assert set(sent) == {"pseq", "epoch", "to", "private"}
        assert sent["to"] == "a"
        answer = await asyncio.wait_for(held_a, 5)  # cut through the 20 s hold
        assert [m["body"] for m in answer["personal"]] == [{"gift": "rocket"}]
        mine = answer["personal"][0]
        assert mine["to"] == "a"
        assert mine["n"] == 1
        assert mine["important"] is True
        assert mine["pseq"] == sent["pseq"] == answer["pseq"]
        assert answer["messages"] == answer["important"] == []
        assert "pgap" not in answer
        # b's poll was not woken: it is still held, and its next answer,
        # brought by a room message, carries nothing personal.
        assert not held_b.done()
        assert holds.count >= 1
        await send(session, node.url, "stage", "room news")
        other = await asyncio.wait_for(held_b, 5)
        assert "personal" not in other
        assert [m["body"] for m in other["messages"]] == [
            "room news"]
        # Nobody else reads it: not a first poll, not a reset, not msgpack.
        for params in ({"uid": "c"}, {"uid": "c", "epoch": "e1", "seq": 1, "iseq": 1}):
            async with session.get(f"{node.url}/v1/rooms/stage/poll",
                                   params={**params, "timeout": 1}) as resp:
                raw = await resp.read()
            assert b"rocket" not in raw
        async with session.get(f"{node.url}/v1/rooms/stage/poll",
                               params={"uid": "b", "epoch": other["epoch"],
                                       "seq": 0, "iseq": 0, "pseq": 0, "timeout": 1},
                               headers={"Accept": "application/msgpack"}) as resp:
            doc = msgpack.unpackb(await resp.read())
        assert "personal" not in doc
        assert doc["pseq"] == sent["pseq"]


async def test_a_listener_behind_gets_each_of_its_own_once_in_order(
        engine_url: str, session: Any) -> None:
    async with running_node(engine_url) as node:
        me = Listener(session, "stage", uid="me")
        await send(session, node.url, "stage", "open")
        await me.poll(node.url)
        for i in range(30):
            await send(session, node.url, "stage", i, to="me" if i % 3 == 0 else f"u{i}")
            if i % 7 == 0:
                await send(session, node.url, "stage", f"chat {i}")
        await node.node.recvsvr.wait_pulled("stage")
        answer = await me.poll(node.url)
        assert [m["body"] for m in answer["personal"]] == list(range(0, 30, 3))
        assert [m["n"] for m in answer["personal"]] == list(range(1, 11))
        assert "pgap" not in answer
        again = await me.poll(node.url, timeout=1)  # nothing twice
        assert "personal" not in again
        assert again["pseq"] == answer["pseq"]


async def test_one_away_longer_than_kept_is_told_how_many_it_missed(
        engine_url: str, session: Any) -> None:
    async with running_node(engine_url, personal_hard_cap=4, important_keep=1) as node:
        me = Listener(session, "stage", uid="me")
        await send(session, node.url, "stage", "open")
        await me.poll(node.url)
        await send(session, node.url, "stage", "first", to="me")
        await me.poll(node.url)
        assert [m["body"] for m in me.personal] == ["first"]
        # Away: 7 more for it among 9 for others; the room keeps only 4.
        for i in range(16):
            await send(session, node.url, "stage", i, to="me" if i % 2 and i < 14 else "x")
        await node.node.recvsvr.wait_pulled("stage")
        answer = await me.poll(node.url)
        # Held: its 8th (i=13) among the newest four; 6 of its own are gone,
        # the others' messages count for nothing.
        assert [m["body"] for m in answer["personal"]] == [13]
        assert answer["pgap"] == 6
        assert answer["personal"][0]["n"] == 8


async def test_a_listener_changing_nodes_misses_and_repeats_nothing(
        redis_url: str, session: Any) -> None:
    async with running_node(redis_url, node_id="a") as one, \
            running_node(redis_url, node_id="b") as two:
        me = Listener(session, "stage", uid="me")
        await send(session, one.url, "stage", "open")
        await me.poll(one.url)
        for i in range(40):
            await send(session, one.url, "stage", i, to="me" if i % 2 else "other")
            if i % 10 == 9:
                await asyncio.gather(one.node.recvsvr.wait_pulled("stage"),
                                     two.node.recvsvr.wait_pulled("stage"))
                await me.poll(one.url if i % 20 == 9 else two.url)
        assert [m["body"] for m in me.personal] == list(range(1, 40, 2))
        assert not any(a.get("pgap") for a in me.answers)


async def test_a_send_to_someone_needs_the_publisher_and_is_important(
        session: Any) -> None:
    async with running_node("memory") as node:
        url = f"{node.url}/v1/rooms/stage/messages"
        auth = {"Authorization": f"Bearer {PUBLISHER}"}
        for doc, headers, status in (
                ({"uid": "s", "body": 1, "to": "me"}, {}, 401),
                ({"uid": "s", "body": 1, "to": "no way"}, auth, 400),
                ({"uid": "s", "body": 1, "to": "me", "important": False}, auth, 400),
                ({"uid": "s", "body": 1, "to": 7}, auth, 400),
                ({"uid": "s", "body": 1, "to": "me", "important": True}, auth, 201)):
            async with session.post(url, json=doc, headers=headers) as resp:
                assert resp.status == status, await resp.text()
                if status != 201:
                    assert set(await resp.json()) == {"error", "message"}
        # A repeated client_msg_id stores one: the same position again.
        doc = {"uid": "s", "body": 2, "to": "me", "client_msg_id": "gift-9"}
        firsts = []
        for _ in range(2):
            async with session.post(url, json=doc, headers=auth) as resp:
                firsts.append((await resp.json())["pseq"])
        assert firsts[0] == firsts[1] == 2


# -- the reading rule against a model ----------------------------------------------


def _item(entry: Entry) -> Item:
    js, mp = encode_message(entry)
    return Item(entry.seq, entry.ts, js, mp)


@settings(max_examples=300, deadline=None)
@given(to=st.lists(st.sampled_from("abc"), max_size=40),
       cap=st.integers(1, 12), cursor=st.integers(0, 40), knows=st.booleans())
def test_a_listener_gets_its_held_ones_after_its_cursor_and_counts_the_rest(
        to: list[str], cap: int, cursor: int, knows: bool) -> None:
    """Messages 1..N for uids a, b, c; the node holds the newest ``cap``; "a"
    read up to position ``cursor`` (its ordinal there known from its context,
    or not)."""
    personal = Personal(keep=1, hard_cap=cap, window_ms=10**9)
    ordinals: dict[str, int] = {}
    entries = []
    for position, uid in enumerate(to, start=1):
        ordinals[uid] = ordinals.get(uid, 0) + 1
        entries.append(Entry(position, 0, "s", True, 1_000 + position, position, to=uid,
                             n=ordinals[uid]))
    personal.add(entries, _item)
    personal.trim(0)
    head = len(to)
    cursor = min(cursor, head)
    mine = [e for e in entries if e.to == "a"]
    pn = sum(1 for e in mine if e.seq <= cursor)
    pts = mine[pn - 1].ts if knows and pn else 0
    got = read_personal(personal, head, "a", cursor, pn if knows else None, pts)
    held = {e.seq for e in entries[-cap:]}
    due = [e.seq for e in mine if e.seq > cursor and e.seq in held]
    lost = sum(1 for e in mine if e.seq > cursor and e.seq not in held)
    if got is None:
        # No mailbox: it never had one held (nor lost one this node saw).
        assert not due
        assert not any(e.seq in held for e in mine)
        return
    assert [i.seq for i in got.items] == due
    assert got.pseq == head
    exact = knows or any(e.seq <= cursor and e.seq in held for e in mine)
    assert got.pgap == (lost if exact else 0)
    assert got.pn in (len(mine), None)
    if mine and (any(e.seq in held for e in mine) or knows):
        assert got.pn == len(mine)
    # The ts its context will name is its newest message's, or unknown.
    assert got.pts in (mine[-1].ts if mine else 0, 0)
    if mine and mine[-1].seq in held:
        assert got.pts == mine[-1].ts


def _history(to: list[str], ts0: int, start: int = 1,
             counted: dict[str, int] | None = None) -> list[Entry]:
    ordinals = dict(counted or {})
    entries = []
    for position, uid in enumerate(to, start=start):
        ordinals[uid] = ordinals.get(uid, 0) + 1
        entries.append(Entry(position, 0, "s", True, ts0 + position, position, to=uid,
                             n=ordinals[uid]))
    return entries


@settings(max_examples=300, deadline=None)
@given(to=st.lists(st.sampled_from("abc"), min_size=1, max_size=30),
       kept=st.integers(0, 30), again=st.lists(st.sampled_from("abc"), max_size=20),
       cap=st.integers(1, 40), cursor=st.integers(0, 30), rewrite=st.booleans())
def test_a_node_tells_a_listener_whose_message_another_took_from_one_whose_stayed(
        to: list[str], kept: int, again: list[str], cap: int, cursor: int,
        rewrite: bool) -> None:
    """"a" read up to ``cursor`` of a history; its context names its ordinal
    there and that message's ts. A node then holds the newest ``cap`` of
    the same history (nothing was lost: never "retaken"), or of one whose
    positions after ``kept`` a restart lost and new messages took (with
    other ts): "retaken" exactly when the node holds a message for "a" at
    or before its cursor with its ordinal but not its ts (the linear model
    here; the rule bisects)."""
    cursor = min(cursor, len(to))
    first = _history(to, 1_000)
    mine = [e for e in first if e.to == "a" and e.seq <= cursor]
    pn = len(mine)
    pts = mine[-1].ts & PTS_MASK if mine else 0
    if rewrite:
        kept = min(kept, len(to))
        counted: dict[str, int] = {}
        for e in first[:kept]:
            assert e.to is not None
            counted[e.to] = e.n
        history = first[:kept] + _history(again, 50_000, kept + 1, counted)
    else:
        history = first
    personal = Personal(keep=1, hard_cap=cap, window_ms=10**9)
    personal.add(history, _item)
    personal.trim(0)
    head = len(history)
    held = history[-cap:]
    expected = bool(pts) and any(
        e.to == "a" and e.seq <= min(cursor, head) and e.n == pn and e.ts & PTS_MASK != pts
        for e in held)
    box = personal.boxes.get("a")
    assert (box is not None and retaken(box, head, cursor, pn, pts)) is expected
    if not rewrite:
        assert not expected  # the same history: no listener is reset
