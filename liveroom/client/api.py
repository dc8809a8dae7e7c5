"""The client of the v1 API: :class:`Client`, one call a method."""

from __future__ import annotations

import asyncio
import os
import secrets
import weakref
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any
from urllib.parse import quote

import aiohttp

from .answers import (
    Approved,
    AuditEntry,
    Broadcast,
    BroadcastEnded,
    BroadcastStarted,
    Cursor,
    Denied,
    FailedEvent,
    FailedEvents,
    Given,
    HeldMessage,
    LiveNode,
    LiveRoom,
    Members,
    OnlineSeries,
    Ranking,
    Recalled,
    RecalledPersonal,
    Retry,
    ReviewQueue,
    RoomModeration,
    RoomSect,
    RoomStats,
    Sanction,
    Sent,
    SeriesPoint,
    VipChange,
    WordList,
)
from .errors import ApiError, ClientClosed, Unreachable, checked_name, refusal
from .listening import Backoff, Listening, wait_or_until

CALL_TIMEOUT = 30.0
"""Seconds any call but a poll may take."""


def _segment(room: str) -> str:
    """``room``, checked, as one segment of a URL path."""
    return quote(checked_name("room", room), safe="")


class Client:
    """The v1 API of a liveroom server at ``url``.

    ``ticket`` (a ticket signed by your backend, for ``--auth ticket``
    servers) goes as ``Authorization: Bearer`` on polls, sends and member
    lists; ``token`` (the admin or the publisher token) on the operators'
    calls and on sends, where it takes precedence over the ticket (the backend
    speaking for the ``uid`` it names; needed for important messages). In
    ``open`` mode neither is needed except for those.

    Use it as ``async with Client(...) as client`` (or call :meth:`close`); it
    makes its own ``aiohttp.ClientSession`` unless given one (which it then
    leaves open). Leaving it ends every listening it made (see :meth:`close`).
    """

    def __init__(self, url: str, *, ticket: str | None = None, token: str | None = None,
                 session: aiohttp.ClientSession | None = None) -> None:
        self.url = url.rstrip("/")
        self.ticket = ticket
        self.token = token
        self._session = session
        self._own_session = session is None
        self._closed = False
        self._closing = asyncio.Event()
        """Set by :meth:`close`: a send waiting to retry stops waiting."""
        # Weak: a listening its caller dropped (a ``break``) needs no stopping.
        self._listenings: weakref.WeakSet[Listening] = weakref.WeakSet()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the client: every listening it made stops, as by
        :meth:`Listening.stop` (a task iterating one has its ``async for``
        ended without an error, :class:`StopAsyncIteration` to ``anext``, the
        poll in flight abandoned; :attr:`Listening.cursor` is where it
        stopped), then the session closes if the client made it. Any call
        after that, or cut short by it, raises :class:`ClientClosed`, and so
        does the first poll of a listening made after it. Closing again does
        nothing.

        A listener used to poll on after its client closed, on a session it
        opened anew, so a program that waited for it never ended (issue 46).
        """
        self._closed = True
        self._closing.set()
        for listening in list(self._listenings):
            listening.stop()
        if self._own_session and self._session is not None:
            session, self._session = self._session, None
            await session.close()

    @property
    def closed(self) -> bool:
        """:meth:`close` was called (leaving ``async with`` calls it)."""
        return self._closed

    @property
    def session(self) -> aiohttp.ClientSession:
        """The session calls go through (made at the first call); once the
        client is closed, :class:`ClientClosed`."""
        if self._closed:
            raise ClientClosed(self.url)
        if self._session is None:
            self._session = aiohttp.ClientSession()
        return self._session

    def _bearer(self, *prefer: str | None) -> dict[str, str]:
        for token in prefer:
            if token:
                return {"Authorization": f"Bearer {token}"}
        return {}

    async def _call(self, method: str, path: str, *, params: Mapping[str, str] | None = None,
                    json: object = None, headers: Mapping[str, str] | None = None,
                    read_for: float = CALL_TIMEOUT) -> Any:
        """One call; its JSON document, or :class:`ApiError` / :class:`Unreachable`
        (:class:`ClientClosed` once the client, or the session it was given, is
        closed)."""
        session = self.session
        try:
            async with session.request(
                    method, f"{self.url}{path}", params=params, json=json,
                    headers=headers, timeout=aiohttp.ClientTimeout(total=read_for)) as resp:
                if resp.status >= 400:
                    raise await refusal(resp)
                try:
                    return await resp.json(content_type=None)
                except ValueError:
                    raise ApiError(resp.status, "bad_answer",
                                   "the answer is not JSON") from None
        except (aiohttp.ClientError, TimeoutError) as exc:
            if self._closed:  # the connection closed under the call
                raise ClientClosed(self.url) from None
            raise Unreachable(self.url, why_unreachable(exc, read_for)) from None
        except RuntimeError:
            if session.closed:  # aiohttp's "Session is closed"
                raise ClientClosed(self.url) from None
            raise

    # -- listening --------------------------------------------------------------

    def listen(self, room: str, *, uid: str | None = None, timeout: int = 25,
               recent: int | None = None, cursor: Cursor | None = None,
               empty: bool = False,
               on_retry: Callable[[Retry], None] | None = None) -> Listening:
        """Listen to ``room``: ``async for answer in client.listen(room)``.

        ``uid`` names the listener in ``open`` mode (in ``ticket`` mode the
        ticket does). ``timeout`` is the poll's hold (1-60 s), ``recent`` how
        many normal messages a first poll (or a reset) brings (0-100, the
        server's default 20). ``cursor`` resumes where an earlier listener
        stopped (:attr:`Listening.cursor`). Answers with nothing to report
        (a hold that timed out) are skipped unless ``empty``; a first poll's
        answer (no ``cursor``) is always yielded. ``on_retry`` is told before each wait after
        a network error, a 429 or a 503.
        """
        listening = Listening(self, checked_name("room", room),
                              uid=None if uid is None else checked_name("uid", uid),
                              timeout=timeout, recent=recent, cursor=cursor, empty=empty,
                              on_retry=on_retry)
        self._listenings.add(listening)
        return listening

    # -- sending --------------------------------------------------------------------

    async def send(self, room: str, body: Any, *, uid: str | None = None,
                   important: bool = False, client_msg_id: str | None = None,
                   to: str | None = None, retries: int = 3,
                   on_retry: Callable[[Retry], None] | None = None) -> Sent:
        """Send ``body`` (any JSON value up to the server's limit, 4 KiB by
        default) to ``room``; the message's ``seq`` and ``epoch``.

        ``uid`` names the sender (in ``ticket`` mode it may be left out: the
        ticket names it). ``important`` needs the publisher or admin token
        (``token``), or a ticket with ``publish``; so does ``to``, which makes
        a personal message for that uid alone (important; ``Sent.pseq``). A
        message the server's word filter holds for review is not in the room
        (``Sent.held``; a blocked one is :class:`ApiError` 403 ``filtered``).
        A 429 (a rate limit) or a 503 is retried after its ``Retry-After``
        (not a 503 ``review_unavailable``: a node without a review queue
        says so every time), a network error after a backoff, up to
        ``retries`` times; every try carries the same
        ``client_msg_id`` (made up when not given), so a send the server
        stored before the connection dropped is not stored twice. Then the
        last failure is raised (:class:`ApiError`, :class:`Unreachable`).
        A send kept back for review (a word filter's or the send hook's
        call) returns ``Sent.held``, its id: not stored until a moderator
        approves it.
        """
        doc: dict[str, Any] = {"body": body, "important": important or to is not None,
                               "client_msg_id": client_msg_id or secrets.token_urlsafe(16)}
        if to is not None:
            doc["to"] = checked_name("to", to)
        if uid is not None:
            doc["uid"] = checked_name("uid", uid)
        path = f"/v1/rooms/{_segment(room)}/messages"
        headers = self._bearer(self.token, self.ticket)
        backoff = Backoff()
        for attempt in range(retries + 1):
            try:
                sent = await self._call("POST", path, json=doc, headers=headers)
                if "held" in sent:
                    return Sent(0, "", held=str(sent["held"]))
                if to is not None:
                    private = sent.get("private")  # absent from an older server
                    return Sent(0, str(sent["epoch"]), int(sent["pseq"]),
                                private=None if private is None else bool(private))
                return Sent(int(sent["seq"]), str(sent["epoch"]))
            except ApiError as exc:
                if (attempt == retries or exc.status not in (429, 503)
                        or exc.code == "review_unavailable"):
                    raise
                wait = Retry(exc.retry_after if exc.retry_after is not None
                             else backoff.next(), exc.status, exc.message)
            except Unreachable as exc:
                if attempt == retries:
                    raise
                wait = Retry(backoff.next(), None, exc.reason)
            if on_retry is not None:
                on_retry(wait)
            await self._pause(wait.delay)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _pause(self, delay: float) -> None:
        """Wait ``delay`` seconds before a retry, or until the client closes:
        then :class:`ClientClosed` at once (a call the closing cut short), not
        after the rest of a Retry-After that may be a slow mode's minutes."""
        await wait_or_until(delay, self._closing)
        if self._closed:
            raise ClientClosed(self.url)

    async def like(self, room: str, count: int = 1, *, uid: str | None = None) -> int:
        """Tap ``count`` (1-100) likes in ``room`` as ``uid`` (in ``ticket`` mode
        the ticket names it); the room's total as the node knows it."""
        doc: dict[str, Any] = {"count": count}
        if uid is not None:
            doc["uid"] = checked_name("uid", uid)
        answer = await self._call("POST", self._room_path(room, "likes"), json=doc,
                                  headers=self._bearer(self.ticket, self.token))
        return int(answer["likes"])

    async def gift(self, room: str, uid: str, value: int, gift: str) -> Given:
        """Give ``uid``'s gift ``gift`` worth ``value`` in ``room`` (the publisher
        or admin token, or a ticket with ``publish``): the giver's rank and score."""
        doc = {"uid": checked_name("uid", uid), "value": value, "gift": gift}
        answer = await self._call("POST", self._room_path(room, "gifts"), json=doc,
                                  headers=self._bearer(self.token, self.ticket))
        return Given(str(answer["room"]), str(answer["uid"]), int(answer["rank"]),
                     int(answer["score"]), int(answer["total"]))

    async def leaderboard(self, room: str, *, limit: int = 10) -> Ranking:
        """The ``limit`` (1-100) top givers of ``room``'s current broadcast."""
        doc = await self._call("GET", self._room_path(room, "leaderboard"),
                               params={"limit": str(limit)})
        return Ranking(str(doc["room"]), tuple((str(g["uid"]), int(g["score"]))
                                               for g in doc["top"]),
                       int(doc["total"]), int(doc["count"]))

    # -- stats (public, but member lists in ticket mode) --------------------------------

    def _room_path(self, room: str, tail: str) -> str:
        return f"/v1/rooms/{_segment(room)}/{tail}"

    async def room_stats(self, room: str) -> RoomStats:
        """``room``'s figures now: online, viewers, sect, head and likes (a room
        nobody used answers zeros)."""
        doc = await self._call("GET", self._room_path(room, "stats"))
        return RoomStats(str(doc["room"]), int(doc["online"]), int(doc["viewers"]),
                         bool(doc["viewers_exact"]), bool(doc["vip"]), int(doc["seq"]),
                         int(doc.get("likes", 0)))

    async def members(self, room: str, *, offset: int = 0, limit: int = 100) -> Members:
        """One page of who is online in ``room`` (a ticket for the room or the
        admin token in ``ticket`` mode)."""
        doc = await self._call("GET", self._room_path(room, "online"),
                               params={"offset": str(offset), "limit": str(limit)},
                               headers=self._bearer(self.ticket, self.token))
        return Members(str(doc["room"]), int(doc["online"]),
                       tuple(str(m) for m in doc["members"]))

    async def online_series(self, room: str, *, since: int | None = None,
                            until: int | None = None) -> OnlineSeries:
        """The online count over time (Unix seconds; the server's default is
        the last hour)."""
        params = {k: str(v) for k, v in (("since", since), ("until", until)) if v is not None}
        doc = await self._call("GET", self._room_path(room, "stats/online"), params=params)
        return OnlineSeries(str(doc["room"]), int(doc["step"]), tuple(
            SeriesPoint(int(t), float(avg), int(top)) for t, avg, top in doc["points"]))

    async def broadcasts(self, room: str) -> tuple[Broadcast, ...]:
        """The room's ended broadcasts, newest first, with their viewers."""
        doc = await self._call("GET", self._room_path(room, "broadcasts"))
        return tuple(Broadcast(int(b["broadcast"]), int(b["ended_at"]), int(b["viewers"]),
                               bool(b["viewers_exact"])) for b in doc["broadcasts"])

    # -- operators (the admin token) --------------------------------------------------

    def _admin(self) -> dict[str, str]:
        return self._bearer(self.token)

    async def _vip(self, method: str, path: str,
                   params: Mapping[str, str] | None = None) -> VipChange:
        doc = await self._call(method, path, params=params, headers=self._admin())
        return VipChange(str(doc["room"]), bool(doc["vip"]), bool(doc["changed"]),
                         RoomSect.of(doc))

    async def vip_add(self, room: str) -> VipChange:
        """Pin ``room`` to the vip sect (moving it there now)."""
        return await self._vip("PUT", f"/v1/admin/vip/{_segment(room)}")

    async def vip_remove(self, room: str) -> VipChange:
        """Unpin ``room`` and move it to the normal sect now (the automatic
        rule may promote it again later)."""
        return await self._vip("DELETE", f"/v1/admin/vip/{_segment(room)}")

    async def vip_pin(self, room: str, sect: str) -> VipChange:
        """Pin ``room`` to ``sect`` (``vip`` or ``normal``), moving it there now."""
        return await self._vip("PUT", f"/v1/admin/vip/{_segment(room)}/pin", {"sect": sect})

    async def vip_unpin(self, room: str) -> VipChange:
        """Give ``room`` back to the automatic rule (it stays in its sect for now)."""
        return await self._vip("DELETE", f"/v1/admin/vip/{_segment(room)}/pin")

    async def vip_rooms(self) -> tuple[str, ...]:
        """The rooms in the vip sect, sorted."""
        doc = await self._call("GET", "/v1/admin/vip", headers=self._admin())
        return tuple(str(r) for r in doc["rooms"])

    async def vip_sects(self) -> tuple[RoomSect, ...]:
        """Every room with a sect record (vip, pinned, watched by the rule or
        recently moved), sorted by room."""
        doc = await self._call("GET", "/v1/admin/vip", headers=self._admin())
        return tuple(RoomSect.of(d) for d in doc["sects"])

    async def vip_sect(self, room: str) -> RoomSect:
        """One room's sect (a room never moved nor pinned: normal, auto)."""
        return RoomSect.of(await self._call("GET", f"/v1/admin/vip/{_segment(room)}",
                                            headers=self._admin()))

    async def start_broadcast(self, room: str) -> BroadcastStarted:
        """Open ``room`` before its first message, so its listeners count online
        from their first poll (an open room is left as it is)."""
        doc = await self._call(
            "POST", f"/v1/admin/rooms/{_segment(room)}/start",
            headers=self._admin())
        return BroadcastStarted(str(doc["room"]), str(doc["epoch"]), int(doc["broadcast"]),
                                bool(doc["created"]))

    async def end_broadcast(self, room: str) -> BroadcastEnded:
        """End ``room``'s broadcast: its log starts empty in a new epoch
        (listeners reset into it, with no recent messages; seqs go on) and its
        viewers count starts a new history, counting at once everyone online
        (who polled in the last ``--online-ttl``, closed tabs included)."""
        doc = await self._call(
            "POST", f"/v1/admin/rooms/{_segment(room)}/end",
            headers=self._admin())
        return BroadcastEnded(str(doc["room"]), str(doc["epoch"]), int(doc["broadcast"]))

    async def biggest_rooms(self, *, limit: int = 20) -> tuple[LiveRoom, ...]:
        """The rooms with the most listeners over every node, largest first
        (``limit`` 1-100), as the nodes last announced them (every few seconds)."""
        doc = await self._call("GET", "/v1/admin/rooms", params={"limit": str(limit)},
                               headers=self._admin())
        return tuple(LiveRoom(str(r["room"]), int(r["online"]), int(r["interval_ms"]),
                              bool(r["vip"]), None if r["messages_per_minute"] is None
                              else float(r["messages_per_minute"])) for r in doc["rooms"])

    async def nodes(self) -> tuple[LiveNode, ...]:
        """The live nodes over the store and what each holds."""
        doc = await self._call("GET", "/v1/admin/nodes", headers=self._admin())
        return tuple(LiveNode(str(n["node"]), int(n["announced_at"]), int(n["expires_at"]),
                              int(n["rooms_cached"]), int(n["held_polls"]), int(n["members"]),
                              int(n["rooms_merged"]), int(n["rooms_listed"]))
                     for n in doc["nodes"])

    # -- moderation --------------------------------------------------------------------

    async def recall(self, room: str, seq: int, *, uid: str | None = None) -> Recalled:
        """Recall message ``seq`` of ``room``, normal or important: the store
        keeps its tombstone, not its body, and every listener is told (its
        next answer lists ``seq`` in :attr:`Answer.recalled`).

        The token (admin or publisher) or a ticket with ``publish`` recall any
        message the room keeps. A sender recalls its own within the server's
        ``--recall-window`` (120 s): with its ticket, or in ``open`` mode by
        naming itself, ``uid`` (then the token is not sent). Recalling twice
        answers the same; a message the room no longer keeps is a 404."""
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
            raise ValueError(f"seq must be a message's seq (1 or more), not {seq!r}")
        params: dict[str, str] = {}
        if uid is not None:
            params["uid"] = checked_name("uid", uid)
            headers = self._bearer(self.ticket)
        else:
            headers = self._bearer(self.token, self.ticket)
        doc = await self._call("DELETE", self._room_path(room, f"messages/{seq}"),
                               params=params, headers=headers)
        return Recalled(str(doc["room"]), int(doc["seq"]), str(doc["uid"]), int(doc["notice"]))

    async def recall_personal(self, room: str, pseq: int) -> RecalledPersonal:
        """Recall the personal message at ``pseq`` in ``room`` (the backend's
        call: the token, or a ticket with ``publish``): its addressee is told
        (its next answer lists ``pseq`` in :attr:`Answer.precalled`), and its
        later answers carry the tombstone."""
        if isinstance(pseq, bool) or not isinstance(pseq, int) or pseq < 1:
            raise ValueError(f"pseq must be a personal message's pseq (1 or more), "
                             f"not {pseq!r}")
        doc = await self._call("DELETE", self._room_path(room, f"personal/{pseq}"),
                               headers=self._bearer(self.token, self.ticket))
        return RecalledPersonal(str(doc["room"]), int(doc["pseq"]), str(doc["uid"]),
                                str(doc["to"]), int(doc["notice"]))

    def _moderation_path(self, room: str, tail: str) -> str:
        return f"/v1/admin/rooms/{_segment(room)}/{tail}"

    async def _sanction(self, room: str, kind: str, uid: str, seconds: int,
                        reason: str) -> Sanction | None:
        path = self._moderation_path(room, f"{kind}/{quote(checked_name('uid', uid), safe='')}")
        doc = await self._call("PUT", path, json={"seconds": seconds, "reason": reason},
                               headers=self._admin())
        given = doc[kind]
        return None if given is None else Sanction.from_doc(str(doc["room"]), given)

    async def _lift(self, room: str, kind: str, uid: str) -> None:
        path = self._moderation_path(room, f"{kind}/{quote(checked_name('uid', uid), safe='')}")
        await self._call("DELETE", path, headers=self._admin())

    async def _sanctions(self, room: str, kind: str) -> tuple[Sanction, ...]:
        doc = await self._call("GET", self._moderation_path(room, kind), headers=self._admin())
        return tuple(Sanction.from_doc(str(doc["room"]), s) for s in doc[kind])

    async def mute(self, room: str, uid: str, seconds: int, reason: str = "") -> Sanction | None:
        """Mute ``uid`` in ``room`` for ``seconds`` (1 to 30 days), replacing a
        mute in force: its sends are refused (403 ``muted``), it still
        listens. ``reason`` (at most 200 characters) goes to the audit. The
        mute as the server holds it (``None`` only if it ended before the
        server read it back)."""
        return await self._sanction(room, "muted", uid, seconds, reason)

    async def unmute(self, room: str, uid: str) -> None:
        """Lift ``uid``'s mute in ``room`` (none to lift is no error)."""
        await self._lift(room, "muted", uid)

    async def ban(self, room: str, uid: str, seconds: int = 0,
                  reason: str = "") -> Sanction | None:
        """Ban ``uid`` from ``room`` for ``seconds`` (up to 30 days; 0: until
        lifted): its polls and sends are refused (403 ``banned``, its held
        polls answered so) and it leaves the online list. The ban as the
        server holds it (``None`` only if it ended before the server read it
        back)."""
        return await self._sanction(room, "banned", uid, seconds, reason)

    async def unban(self, room: str, uid: str) -> None:
        """Lift ``uid``'s ban from ``room`` (none to lift is no error)."""
        await self._lift(room, "banned", uid)

    async def mutes(self, room: str) -> tuple[Sanction, ...]:
        """The mutes in force in ``room``, by uid."""
        return await self._sanctions(room, "muted")

    async def bans(self, room: str) -> tuple[Sanction, ...]:
        """The bans in force in ``room``, by uid."""
        return await self._sanctions(room, "banned")

    async def slow(self, room: str, seconds: int) -> int:
        """Put ``room`` in slow mode: each uid may send one normal message per
        ``seconds`` (up to 30 days; 0 lifts it); its answers then carry
        :attr:`Answer.slow`. The room's slow mode now."""
        doc = await self._call("PUT", self._moderation_path(room, "slow"),
                               json={"seconds": seconds}, headers=self._admin())
        return int(doc["slow"])

    async def moderation(self, room: str, limit: int = 100) -> RoomModeration:
        """``room``'s slow mode, how many mutes and bans are in force, and the
        ``limit`` (1-1000) newest actions of its current broadcast's audit,
        newest first."""
        doc = await self._call("GET", self._moderation_path(room, "moderation"),
                               params={"limit": str(limit)}, headers=self._admin())
        return RoomModeration(str(doc["room"]), int(doc["slow"]), int(doc["muted"]),
                              int(doc["banned"]),
                              tuple(AuditEntry.from_doc(e) for e in doc["audit"]))


    # -- the review queue ------------------------------------------------------------

    def _held_path(self, room: str, held_id: str, verdict: str) -> str:
        if not isinstance(held_id, str) or not held_id.isascii() or not held_id.isdigit():
            raise ValueError(f"a held message's id is its digits, not {held_id!r}")
        return self._moderation_path(room, f"review/{held_id}/{verdict}")

    async def held(self, room: str, limit: int = 100) -> ReviewQueue:
        """``room``'s messages held for review, oldest first, at most
        ``limit`` (1-1000), and how many wait in all (the admin token)."""
        doc = await self._call("GET", self._moderation_path(room, "review"),
                               params={"limit": str(limit)}, headers=self._admin())
        return ReviewQueue(str(doc["room"]), int(doc["count"]),
                           tuple(HeldMessage.from_doc(h) for h in doc["held"]))

    async def approve(self, room: str, held_id: str) -> Approved:
        """Approve held message ``held_id`` of ``room``: stored now as its
        sender's, every listener gets it. Approving twice answers the same;
        a message denied, or whose sender is muted or banned now, is a 409
        (the latter stays held)."""
        doc = await self._call("POST", self._held_path(room, held_id, "approve"),
                               headers=self._admin())
        return Approved.from_doc(doc)

    async def deny(self, room: str, held_id: str) -> Denied:
        """Deny held message ``held_id`` of ``room``: it is dropped. Denying
        twice answers the same; a message approved is a 409."""
        doc = await self._call("POST", self._held_path(room, held_id, "deny"),
                               headers=self._admin())
        return Denied(str(doc["room"]), str(doc["id"]), str(doc["uid"]))
    # -- the word filter (the admin token) -----------------------------------------------

    async def word_lists(self) -> tuple[WordList, ...]:
        """Every list of the server's word filter, by name."""
        doc = await self._call("GET", "/v1/admin/filters", headers=self._admin())
        return tuple(WordList.from_doc(d) for d in doc["lists"])

    async def put_word_list(self, name: str, words: Sequence[str], action: str,
                            rooms: Sequence[str] = ()) -> WordList:
        """Store the word list ``name`` (replacing one of that name): its
        ``words`` (each once; folded to match: case, full-width, marks,
        spaces and symbols aside), its ``action`` (``block``, ``hold`` or
        ``mask``) and the ``rooms`` it applies to (none: every room). The
        list as stored; every node applies it within about a second."""
        doc = await self._call("PUT", f"/v1/admin/filters/{_list_segment(name)}",
                               json={"words": list(words), "action": action,
                                     "rooms": list(rooms)}, headers=self._admin())
        return WordList.from_doc(doc)

    async def delete_word_list(self, name: str) -> None:
        """Delete the word list ``name`` (:class:`ApiError` 404 when there is none)."""
        await self._call("DELETE", f"/v1/admin/filters/{_list_segment(name)}",
                         headers=self._admin())

    # -- the webhooks (the admin token) --------------------------------------------------

    async def failed_events(self, limit: int = 100) -> FailedEvents:
        """The webhook events given up, oldest first, at most ``limit``
        (1-1000), and how many are kept in all."""
        doc = await self._call("GET", "/v1/admin/webhooks/failed",
                               params={"limit": str(limit)}, headers=self._admin())
        return FailedEvents(int(doc["count"]),
                            tuple(FailedEvent.from_doc(f) for f in doc["failed"]))

    async def replay_events(self, ids: Sequence[str] | None = None) -> tuple[str, ...]:
        """Send the failed events ``ids`` again (``None``: every one), each
        under its own id; the ids replayed (those the failed list held)."""
        doc = await self._call("POST", "/v1/admin/webhooks/replay",
                               json=None if ids is None else {"ids": list(ids)},
                               headers=self._admin())
        return tuple(str(i) for i in doc["replayed"])


def _list_segment(name: str) -> str:
    """A word list's name, checked as a room's is (a path segment)."""
    try:
        return quote(checked_name("room", name), safe="")
    except ValueError:
        raise ValueError(f"a word list's name must match [A-Za-z0-9_.-]{{1,64}}, not only "
                         f"dots, not {name!r}") from None


def why_unreachable(exc: BaseException, read_for: float) -> str:
    """What went wrong, in the user's terms: aiohttp's own text names the
    connector's TLS setting even for plain http ("ssl:default")."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        error = exc.os_error
        # asyncio words it "Connect call failed (host, port)"; the errno says it plainly.
        return os.strerror(error.errno) if error.errno else str(error) or "cannot connect"
    if isinstance(exc, TimeoutError):
        return f"no answer within {read_for:g} s"
    return str(exc) or type(exc).__name__
