"""A Python client of the v1 HTTP API (aiohttp): listen to a room, send to it,
and the operators' calls.

::

    async with Client("http://127.0.0.1:8080") as client:
        await client.send("demo", {"text": "hello"}, uid="bob")
        async for answer in client.listen("demo", uid="alice"):
            for message in answer.delivered:      # important ones first
                print(message.seq, message.body)

**The listening loop** follows the contract (DESIGN.md, "Listening"): a first
poll without cursors, then at once another with the ``epoch``, ``seq``,
``iseq`` and ``ctx`` of the last answer. It never sleeps between answers: in a
big room the server paces the listener (``interval_ms``) by holding its poll,
so polling again at once is right. Each answer it yields carries the important
messages before the normal ones, and says when cursors were reset (``reset``:
the log restarted, an ended broadcast) and how many messages the listener
missed (``gap``, ``igap``). A network error or a read that outlasts
``timeout`` + ``interval_ms`` + :data:`READ_MARGIN` is retried with the same
cursors after an exponential, jittered backoff (:data:`BACKOFF_FIRST` up to
:data:`BACKOFF_MAX` seconds); a 429 or 503 after its ``Retry-After``. Any other
refusal (a bad name, a missing ticket) ends the loop with :class:`ApiError`:
retrying it would fail the same way.

**Stopping.** ``break`` out of the ``async for``, call :meth:`Listening.stop`
from elsewhere (the poll in flight is abandoned and its connection closed;
the iteration ends without an error), or cancel the task.

This module is part of the core: it imports no role, and nothing of the server
beyond the name rule.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import secrets
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any
from urllib.parse import quote

import aiohttp

from .model import is_name

READ_MARGIN = 10.0
"""Seconds a poll's read may take beyond its ``timeout`` and ``interval_ms``
before the client gives up on it and polls again."""
BACKOFF_FIRST = 0.5
"""Seconds before the first retry after a network error."""
BACKOFF_MAX = 30.0
"""Longest wait between two retries (network errors, or a ``Retry-After``)."""
CALL_TIMEOUT = 30.0
"""Seconds any call but a poll may take."""


# -- what the server answers ----------------------------------------------------

@dataclass(frozen=True, slots=True)
class Message:
    """One message of a room, as a poll delivers it."""

    seq: int
    uid: str
    important: bool
    ts: int
    """Milliseconds since the Unix epoch, when the server accepted it."""
    body: Any

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> Message:
        return cls(int(doc["seq"]), str(doc["uid"]), bool(doc["important"]),
                   int(doc["ts"]), doc["body"])


@dataclass(frozen=True, slots=True)
class Answer:
    """One poll's answer."""

    room: str
    epoch: str
    seq: int
    """The last normal position delivered or counted."""
    iseq: int
    """The last important position delivered or counted."""
    important: tuple[Message, ...]
    messages: tuple[Message, ...]
    gap: int
    """Normal messages this listener had not read that are gone (evicted or skipped)."""
    igap: int
    """Important messages likewise gone."""
    reset: bool
    """The cursors did not fit the room (a new epoch, an ended broadcast): this
    answer is like a first poll."""
    ctx: str
    online: int
    interval_ms: int
    """Longest the server's pacing may hold this listener's next poll now."""

    @property
    def delivered(self) -> tuple[Message, ...]:
        """Every message of the answer in delivery order: important ones first."""
        return self.important + self.messages

    @property
    def empty(self) -> bool:
        """Nothing to report: no message, no gap, no reset (a timed-out hold)."""
        return not (self.important or self.messages or self.gap or self.igap or self.reset)

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> Answer:
        return cls(
            room=str(doc["room"]), epoch=str(doc["epoch"]), seq=int(doc["seq"]),
            iseq=int(doc["iseq"]),
            important=tuple(Message.from_doc(m) for m in doc["important"]),
            messages=tuple(Message.from_doc(m) for m in doc["messages"]),
            gap=int(doc["gap"]), igap=int(doc["igap"]), reset=bool(doc["reset"]),
            ctx=str(doc["ctx"]), online=int(doc["online"]),
            interval_ms=int(doc["interval_ms"]))


@dataclass(frozen=True, slots=True)
class Cursor:
    """Where a listener stands: pass it to :meth:`Client.listen` to resume."""

    epoch: str
    seq: int
    iseq: int
    ctx: str = ""


@dataclass(frozen=True, slots=True)
class Sent:
    """A send's answer: the message's place in the room's log."""

    seq: int
    epoch: str


@dataclass(frozen=True, slots=True)
class RoomStats:
    room: str
    online: int
    viewers: int
    """Distinct listeners of the current broadcast (never goes down)."""
    viewers_exact: bool
    """False once the viewers are estimated (a HyperLogLog)."""
    vip: bool
    seq: int
    """The room's head: the seq of its last message."""


@dataclass(frozen=True, slots=True)
class Members:
    room: str
    online: int
    members: tuple[str, ...]
    """One page of the online uids, sorted."""


@dataclass(frozen=True, slots=True)
class SeriesPoint:
    t: int
    """Start of the step, Unix seconds."""
    avg: float
    max: int


@dataclass(frozen=True, slots=True)
class OnlineSeries:
    room: str
    step: int
    """Seconds each point covers."""
    points: tuple[SeriesPoint, ...]


@dataclass(frozen=True, slots=True)
class Broadcast:
    """An ended broadcast of a room."""

    broadcast: int
    ended_at: int
    """Milliseconds since the Unix epoch."""
    viewers: int
    viewers_exact: bool


@dataclass(frozen=True, slots=True)
class VipChange:
    room: str
    vip: bool
    changed: bool
    """False when the whitelist already said so."""


@dataclass(frozen=True, slots=True)
class BroadcastEnded:
    room: str
    epoch: str
    """The epoch the room's log goes on in."""
    broadcast: int
    """The number of the broadcast that started."""


@dataclass(frozen=True, slots=True)
class Retry:
    """Why the client waits before trying again (see ``on_retry``)."""

    delay: float
    """Seconds it waits."""
    status: int | None
    """The HTTP status (429, 503), or None for a network error."""
    reason: str


# -- errors -------------------------------------------------------------------------

class ClientError(Exception):
    """Base of the client's errors."""


class ApiError(ClientError):
    """The server refused a call: its status, its error code (the ``error``
    field: ``bad_request``, ``unauthorized``, ``rate_limited``...) and message."""

    def __init__(self, status: int, code: str, message: str, *,
                 retry_after: float | None = None) -> None:
        super().__init__(f"{message} (HTTP {status} {code})")
        self.status = status
        self.code = code
        self.message = message
        self.retry_after = retry_after
        """Seconds the server asked to wait (429, 503), when it said."""


class Unreachable(ClientError):
    """The server could not be reached, or did not answer in time."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"cannot reach {url}: {reason}")
        self.url = url
        self.reason = reason


def _retry_after(headers: Mapping[str, str]) -> float | None:
    raw = headers.get("Retry-After")
    if raw is None:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:  # an HTTP date: the server never sends one
        return None


async def _refusal(resp: aiohttp.ClientResponse) -> ApiError:
    """The error a non-2xx answer stands for (``{"error", "message"}``, or
    whatever a proxy in front of the server said)."""
    text = await resp.text(errors="replace")
    code, message = "http_error", text.strip()[:200] or (resp.reason or "")
    with contextlib.suppress(ValueError):
        doc = await resp.json(content_type=None)
        if isinstance(doc, dict):
            code = str(doc.get("error", code))
            message = str(doc.get("message", message))
    return ApiError(resp.status, code, message, retry_after=_retry_after(resp.headers))


def _name(kind: str, value: str) -> str:
    """A room or uid, checked before it goes into a URL."""
    if not isinstance(value, str) or not is_name(value):
        raise ValueError(f"{kind} must match [A-Za-z0-9_.-]{{1,64}}, not {value!r}")
    return value


# -- the client ---------------------------------------------------------------------

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
    leaves open).
    """

    def __init__(self, url: str, *, ticket: str | None = None, token: str | None = None,
                 session: aiohttp.ClientSession | None = None) -> None:
        self.url = url.rstrip("/")
        self.ticket = ticket
        self.token = token
        self._session = session
        self._own_session = session is None

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    async def close(self) -> None:
        if self._own_session and self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def session(self) -> aiohttp.ClientSession:
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
        """One call; its JSON document, or :class:`ApiError` / :class:`Unreachable`."""
        try:
            async with self.session.request(
                    method, f"{self.url}{path}", params=params, json=json,
                    headers=headers, timeout=aiohttp.ClientTimeout(total=read_for)) as resp:
                if resp.status >= 400:
                    raise await _refusal(resp)
                try:
                    return await resp.json(content_type=None)
                except ValueError:
                    raise ApiError(resp.status, "bad_answer",
                                   "the answer is not JSON") from None
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise Unreachable(self.url, str(exc) or type(exc).__name__) from None

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
        (a hold that timed out) are skipped unless ``empty``; the first
        answer is always yielded. ``on_retry`` is told before each wait after
        a network error, a 429 or a 503.
        """
        return Listening(self, _name("room", room),
                         uid=None if uid is None else _name("uid", uid), timeout=timeout,
                         recent=recent, cursor=cursor, empty=empty, on_retry=on_retry)

    # -- sending --------------------------------------------------------------------

    async def send(self, room: str, body: Any, *, uid: str | None = None,
                   important: bool = False, client_msg_id: str | None = None,
                   retries: int = 3,
                   on_retry: Callable[[Retry], None] | None = None) -> Sent:
        """Send ``body`` (any JSON value up to the server's limit, 4 KiB by
        default) to ``room``; the message's ``seq`` and ``epoch``.

        ``uid`` names the sender (in ``ticket`` mode it may be left out: the
        ticket names it). ``important`` needs the publisher or admin token
        (``token``), or a ticket with ``publish``. A 429 (a rate limit) or a
        503 is retried after its ``Retry-After``, a network error after a
        backoff, up to ``retries`` times; every try carries the same
        ``client_msg_id`` (made up when not given), so a send the server
        stored before the connection dropped is not stored twice. Then the
        last failure is raised (:class:`ApiError`, :class:`Unreachable`).
        """
        doc: dict[str, Any] = {"body": body, "important": important,
                               "client_msg_id": client_msg_id or secrets.token_urlsafe(16)}
        if uid is not None:
            doc["uid"] = _name("uid", uid)
        path = f"/v1/rooms/{quote(_name('room', room), safe='')}/messages"
        headers = self._bearer(self.token, self.ticket)
        backoff = Backoff()
        for attempt in range(retries + 1):
            try:
                sent = await self._call("POST", path, json=doc, headers=headers)
                return Sent(int(sent["seq"]), str(sent["epoch"]))
            except ApiError as exc:
                if attempt == retries or exc.status not in (429, 503):
                    raise
                wait = Retry(exc.retry_after if exc.retry_after is not None
                             else backoff.next(), exc.status, exc.message)
            except Unreachable as exc:
                if attempt == retries:
                    raise
                wait = Retry(backoff.next(), None, exc.reason)
            if on_retry is not None:
                on_retry(wait)
            await asyncio.sleep(min(wait.delay, BACKOFF_MAX))
        raise AssertionError("unreachable")  # pragma: no cover

    # -- stats (public, but member lists in ticket mode) --------------------------------

    def _room_path(self, room: str, tail: str) -> str:
        return f"/v1/rooms/{quote(_name('room', room), safe='')}/{tail}"

    async def room_stats(self, room: str) -> RoomStats:
        doc = await self._call("GET", self._room_path(room, "stats"))
        return RoomStats(str(doc["room"]), int(doc["online"]), int(doc["viewers"]),
                         bool(doc["viewers_exact"]), bool(doc["vip"]), int(doc["seq"]))

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

    async def _vip(self, method: str, room: str) -> VipChange:
        doc = await self._call(method, f"/v1/admin/vip/{quote(_name('room', room), safe='')}",
                               headers=self._admin())
        return VipChange(str(doc["room"]), bool(doc["vip"]), bool(doc["changed"]))

    async def vip_add(self, room: str) -> VipChange:
        """Whitelist ``room`` into the vip sect."""
        return await self._vip("PUT", room)

    async def vip_remove(self, room: str) -> VipChange:
        """Take ``room`` off the vip whitelist."""
        return await self._vip("DELETE", room)

    async def vip_rooms(self) -> tuple[str, ...]:
        """The whitelisted rooms, sorted."""
        doc = await self._call("GET", "/v1/admin/vip", headers=self._admin())
        return tuple(str(r) for r in doc["rooms"])

    async def end_broadcast(self, room: str) -> BroadcastEnded:
        """End ``room``'s broadcast: its log goes on in a new epoch (listeners
        reset into it) and its viewers count starts over."""
        doc = await self._call(
            "POST", f"/v1/admin/rooms/{quote(_name('room', room), safe='')}/end",
            headers=self._admin())
        return BroadcastEnded(str(doc["room"]), str(doc["epoch"]), int(doc["broadcast"]))


class Backoff:
    """Exponential backoff with full jitter: the n-th wait is uniform in
    ``[d/2, d]`` with ``d = min(BACKOFF_MAX, BACKOFF_FIRST * 2**n)``."""

    def __init__(self) -> None:
        self.tries = 0

    def next(self) -> float:
        ceiling = min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** min(self.tries, 16))
        self.tries += 1
        return random.uniform(ceiling / 2, ceiling)

    def reset(self) -> None:
        self.tries = 0


class Listening:
    """A room being listened to: an async iterator of :class:`Answer`.

    Made by :meth:`Client.listen`. :meth:`stop` ends it from anywhere (the
    poll in flight is abandoned); ``async with`` stops it on exit.
    """

    def __init__(self, client: Client, room: str, *, uid: str | None, timeout: int,
                 recent: int | None, cursor: Cursor | None, empty: bool,
                 on_retry: Callable[[Retry], None] | None) -> None:
        self.client = client
        self.room = room
        self.uid = uid
        self.timeout = timeout
        self.recent = recent
        self.cursor = cursor
        """Where the listener stands (None before the first answer)."""
        self.interval_ms = 0
        self.empty = empty
        self.on_retry = on_retry
        self._stopped = asyncio.Event()
        self._backoff = Backoff()

    def stop(self) -> None:
        """End the iteration: a poll in flight is abandoned (its connection
        closed), a wait cut short; the next ``__anext__`` ends it."""
        self._stopped.set()

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def __aiter__(self) -> AsyncIterator[Answer]:
        return self

    async def __aenter__(self) -> Listening:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        self.stop()

    async def __anext__(self) -> Answer:
        while not self._stopped.is_set():
            first = self.cursor is None
            try:
                answer = await self._until_stopped(self._poll())
            except _Stopped:
                break
            except ApiError as exc:
                if exc.status not in (429, 503):
                    raise
                delay = exc.retry_after if exc.retry_after is not None else self._backoff.next()
                await self._wait(Retry(delay, exc.status, exc.message))
                continue
            except Unreachable as exc:
                await self._wait(Retry(self._backoff.next(), None, exc.reason))
                continue
            self._backoff.reset()
            self.cursor = Cursor(answer.epoch, answer.seq, answer.iseq, answer.ctx)
            self.interval_ms = answer.interval_ms
            if first or self.empty or not answer.empty:
                return answer
        raise StopAsyncIteration

    async def _until_stopped(self, call: Coroutine[Any, Any, Answer]) -> Answer:
        """``await call``, unless :meth:`stop` comes first (then :class:`_Stopped`)."""
        poll: asyncio.Task[Answer] = asyncio.ensure_future(call)
        stopped = asyncio.ensure_future(self._stopped.wait())
        try:
            await asyncio.wait((poll, stopped), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (poll, stopped):
                if not task.done():
                    task.cancel()
            # Let the cancelled poll close its connection before going on.
            with contextlib.suppress(asyncio.CancelledError):
                await stopped
            if not poll.done():
                with contextlib.suppress(asyncio.CancelledError):
                    await poll
        if poll.cancelled():
            raise _Stopped
        return poll.result()

    async def _wait(self, retry: Retry) -> None:
        """Wait ``retry.delay`` seconds (capped), or until stopped."""
        retry = Retry(min(retry.delay, BACKOFF_MAX), retry.status, retry.reason)
        if self.on_retry is not None:
            self.on_retry(retry)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopped.wait(), retry.delay)

    async def _poll(self) -> Answer:
        params: dict[str, str] = {"timeout": str(self.timeout)}
        if self.uid is not None:
            params["uid"] = self.uid
        cursor = self.cursor
        if cursor is None:
            if self.recent is not None:
                params["recent"] = str(self.recent)
        else:
            params.update(epoch=cursor.epoch, seq=str(cursor.seq), iseq=str(cursor.iseq))
            if cursor.ctx:
                params["ctx"] = cursor.ctx
            if self.recent is not None:  # what a reset brings
                params["recent"] = str(self.recent)
        client = self.client
        read_for = self.timeout + self.interval_ms / 1000 + READ_MARGIN
        doc = await client._call("GET", f"/v1/rooms/{quote(self.room, safe='')}/poll",
                                 params=params, headers=client._bearer(client.ticket),
                                 read_for=read_for)
        return Answer.from_doc(doc)


class _Stopped(Exception):
    """The listening was stopped while a poll was in flight."""
