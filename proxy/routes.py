"""The HTTP routes of the proxy role and the middleware that shapes errors."""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import msgpack
from aiohttp import web

from liveroom.clock import Clock
from liveroom.codec import JSON, MSGPACK, decode_request, wants_msgpack
from liveroom.errors import (
    BadRequest,
    LiveroomError,
    RateLimited,
    RequestTimeout,
    StoreUnavailable,
    TooLarge,
    UnsupportedMedia,
)
from liveroom.metrics import Metrics
from liveroom.model import NewMessage, check_name
from liveroom.roles import RoomReader, StatsReader
from liveroom.settings import Settings
from liveroom.snapshot import Delivery, Snapshot, read, recent
from liveroom.store.base import MessageLog

from . import answer
from .auth import Right, Tokens
from .context import Context, ContextSigner
from .heartbeats import Heartbeats
from .hold import Holds
from .params import (
    PollParams,
    parse_members_page,
    parse_poll,
    parse_send,
    parse_series_range,
)
from .tiers import Pace, TierTable

log = logging.getLogger("liveroom.proxy")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def error_response(status: int, code: str, message: str,
                   retry_after: float | None = None) -> web.Response:
    # Retry-After is whole seconds: round up, so a client never comes back early.
    headers = {"Retry-After": str(max(1, math.ceil(retry_after)))} if retry_after else None
    return web.json_response({"error": code, "message": message}, status=status,
                             headers=headers)


@web.middleware
async def errors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure becomes ``{"error", "message"}`` with its status."""
    try:
        return await handler(request)
    except LiveroomError as exc:
        return error_response(exc.status, exc.code, exc.message,
                              exc.retry_after if exc.temporary else None)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code = exc.reason.lower().replace(" ", "_")
        return error_response(exc.status, code, exc.text or exc.reason)
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("unexpected error answering %s %s", request.method, request.path)
        return error_response(500, "internal", "internal error")


@dataclass
class Proxy:
    """The proxy role: its routes, the held polls, and what it needs from others."""

    settings: Settings
    reader: RoomReader
    heartbeats: Heartbeats
    stats: StatsReader
    is_vip: Callable[[str], bool]
    log: MessageLog
    tokens: Tokens
    signer: ContextSigner
    clock: Clock
    metrics: Metrics
    health: Callable[[], Awaitable[str | None]]
    """Returns None when healthy, else what is wrong."""

    def __post_init__(self) -> None:
        self.tiers = TierTable(self.settings.tiers)
        self.holds = Holds(self.reader, self.clock, tick=self.settings.hold_tick,
                           cut_every=self.settings.cut_through_every)
        self.metrics.track(self.metrics.held_polls, lambda: self.holds.count)

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get("/v1/rooms/{room}/poll", self.poll)
        app.router.add_post("/v1/rooms/{room}/messages", self.send)
        app.router.add_get("/v1/rooms/{room}/online", self.online)
        app.router.add_get("/v1/rooms/{room}/stats", self.room_stats)
        app.router.add_get("/v1/rooms/{room}/stats/online", self.online_series)
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/metrics", self.render_metrics)

    # -- listening -----------------------------------------------------------

    async def poll(self, request: web.Request) -> web.StreamResponse:
        s = self.settings
        p = parse_poll(request.match_info["room"], request.query,
                       default_timeout=s.poll_timeout, max_timeout=s.poll_timeout_max,
                       recent_default=s.recent_default, recent_max=s.recent_max)
        use_msgpack = wants_msgpack(request.headers.get("Accept", ""))
        snap = await self.reader.snapshot(p.room)
        self.heartbeats.beat(p.room, p.uid)
        online = self.stats.online(p.room)
        if p.seq is None or p.iseq is None or p.epoch is None:
            pace = self.tiers.pace(online, p.uid, self._now_ms())
            return self._answer(snap, p, recent(snap, p.recent), use_msgpack, pace,
                                outcome="first")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + p.timeout
        if p.epoch != snap.epoch or p.seq > snap.head or p.iseq > snap.head:
            # This node may only lag behind the node the listener came from:
            # confirm with a fresh pull before resetting.
            snap = await self.reader.wait_pulled(p.room)
            if p.epoch != snap.epoch or p.seq > snap.head or p.iseq > snap.head:
                pace = self.tiers.pace(online, p.uid, self._now_ms())
                return self._answer(snap, p, recent(snap, p.recent), use_msgpack, pace,
                                    reset=True, outcome="reset")
        ctx = self.signer.verify(p.ctx, p.room, p.uid, p.epoch, p.seq, p.iseq)
        now_ms = self._now_ms()
        # A missing, forged, foreign or stale context counts as an answer just
        # now: replaying an old one gains nothing. A time ahead of ours (another
        # node's clock) counts as now too.
        last_ms = min(ctx.last_ms, now_ms) if ctx is not None else now_ms
        pace = self.tiers.pace(online, p.uid, last_ms)
        hint_seq = ctx.seq_ic if ctx else None
        hint_iseq = ctx.iseq_ic if ctx else None
        d = read(snap, p.seq, p.iseq, limit=s.answer_limit,
                 seq_ic=hint_seq, iseq_ic=hint_iseq)
        # A plain pace is due at once (its due time is its last answer's).
        if not d.empty and now_ms >= pace.due_ms:
            return self._answer(snap, p, d, use_msgpack, pace, outcome="delivered")
        hold: Callable[[Snapshot, Delivery], Awaitable[Snapshot | None]]
        if pace.plain:
            def hold(snap: Snapshot, d: Delivery) -> Awaitable[Snapshot | None]:
                return self.holds.wait(p.room, snap, deadline - loop.time())
        else:
            # Held by the room's ticker until due (or an important message
            # cuts through), on the clock's monotonic time.
            mono = self.clock.monotonic()
            due, paced_deadline = mono + (pace.due_ms - now_ms) / 1000, mono + p.timeout

            epoch, seq, iseq = p.epoch, p.seq, p.iseq

            def hold(snap: Snapshot, d: Delivery) -> Awaitable[Snapshot | None]:
                return self.holds.wait_paced(p.room, snap, epoch=epoch, seq=seq, iseq=iseq,
                                             pending=not d.empty, due=due,
                                             deadline=paced_deadline)
        while True:
            nxt = await hold(snap, d)
            if nxt is None:
                return self._answer(snap, p, d, use_msgpack, pace, outcome="empty",
                                    keep_cursors=True)
            snap = nxt
            if snap.epoch != p.epoch:
                return self._answer(snap, p, recent(snap, p.recent), use_msgpack, pace,
                                    reset=True, outcome="reset")
            d = read(snap, p.seq, p.iseq, limit=s.answer_limit,
                     seq_ic=hint_seq, iseq_ic=hint_iseq)
            if not d.empty:
                return self._answer(snap, p, d, use_msgpack, pace, outcome="delivered")

    def _now_ms(self) -> int:
        return int(self.clock.time() * 1000)

    def _answer(self, snap: Snapshot, p: PollParams, d: Delivery, use_msgpack: bool,
                pace: Pace, *, outcome: str, reset: bool = False,
                keep_cursors: bool = False) -> web.Response:
        """Encode the answer. An empty answer keeps the listener's last
        non-empty answer time (``pace.last_ms``) in its new context; any other
        answer starts a new interval now."""
        self.metrics.polls.labels(outcome).inc()
        if d.important:
            self.metrics.deliveries.labels("important").inc(len(d.important))
        if d.messages:
            self.metrics.deliveries.labels("normal").inc(len(d.messages))
        if keep_cursors:
            # An empty answer: the listener's own cursors and epoch, unchanged.
            assert p.epoch is not None
            epoch, memo_snap, last_ms = p.epoch, None, pace.last_ms
        else:
            epoch, memo_snap, last_ms = snap.epoch, snap, self._now_ms()
        ctx = self.signer.sign(p.room, p.uid, epoch, d.seq, d.iseq,
                               Context(d.seq_ic, d.iseq_ic, last_ms))
        body = answer.encode(memo_snap, p.room, epoch, d, reset=reset,
                             online=self.stats.online(p.room), interval_ms=pace.interval_ms,
                             ctx=ctx, use_msgpack=use_msgpack)
        return web.Response(body=body, content_type=MSGPACK if use_msgpack else JSON)

    # -- sending -------------------------------------------------------------

    async def _read_body(self, request: web.Request) -> bytes:
        if request.headers.get("Content-Encoding", "identity").lower() != "identity":
            raise UnsupportedMedia("compressed bodies are not accepted")
        limit = self.settings.max_message_bytes + 1024
        length = request.content_length
        if length is not None and length > limit:
            raise TooLarge(f"request body is larger than {limit} bytes")
        # ``read(n)`` returns what has arrived so far, not n bytes: read until
        # the end of the body (a chunked body comes in pieces of any size).
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(self.settings.request_timeout):
                while chunk := await request.content.read(limit + 1 - size):
                    chunks.append(chunk)
                    size += len(chunk)
                    if size > limit:
                        raise TooLarge(f"request body is larger than {limit} bytes")
        except TimeoutError:
            raise RequestTimeout("request body not received in time") from None
        if length is not None and size < length:
            raise BadRequest("request body ended early")
        return b"".join(chunks)

    async def send(self, request: web.Request) -> web.StreamResponse:
        room = check_name("room", request.match_info["room"])
        raw = await self._read_body(request)
        doc = decode_request(request.content_type, raw)
        sp = parse_send(doc, max_body=self.settings.max_message_bytes)
        authorization = request.headers.get("Authorization")
        # The business backend (publisher or admin token) is not rate limited;
        # a token that is sent must be right, even where none is needed.
        trusted = sp.important or authorization is not None
        if trusted:
            self.tokens.require(authorization, Right.PUBLISH)
        limits = self.settings.rate_limits
        message = NewMessage(uid=sp.uid, body=sp.body, important=sp.important,
                             ts=self._now_ms(), client_msg_id=sp.client_msg_id)
        try:
            appended = await self.log.append(
                room, message, None if trusted or limits.off else limits)
        except RateLimited:
            self.metrics.sends.labels("limited").inc()
            raise
        except StoreUnavailable:
            self.metrics.sends.labels("unavailable").inc()
            self.metrics.store_errors.labels("append").inc()
            raise
        self.metrics.sends.labels("duplicate" if appended.duplicate else "stored").inc()
        doc = {"seq": appended.seq, "epoch": appended.epoch}
        if wants_msgpack(request.headers.get("Accept", "")):
            return web.Response(body=msgpack.packb(doc), status=201, content_type=MSGPACK)
        return web.json_response(doc, status=201)

    # -- stats -----------------------------------------------------------------

    def _doc(self, request: web.Request, doc: dict[str, object]) -> web.Response:
        if wants_msgpack(request.headers.get("Accept", "")):
            return web.Response(body=msgpack.packb(doc), content_type=MSGPACK)
        return web.json_response(doc)

    async def online(self, request: web.Request) -> web.StreamResponse:
        room, offset, limit = parse_members_page(request.match_info["room"], request.query)
        online, members = await self.stats.members(room, offset, limit)
        return self._doc(request, {"room": room, "online": online, "members": members})

    async def room_stats(self, request: web.Request) -> web.StreamResponse:
        room = check_name("room", request.match_info["room"])
        figures = await self.stats.stats(room)
        snap = await self.reader.snapshot(room)
        return self._doc(request, {
            "room": room, "online": figures.online, "viewers": figures.viewers,
            "viewers_exact": figures.viewers_exact, "vip": self.is_vip(room),
            "seq": snap.head,
        })

    async def online_series(self, request: web.Request) -> web.StreamResponse:
        room, since, until = parse_series_range(request.match_info["room"], request.query,
                                                self.clock.time())
        step, points = await self.stats.online_series(room, since, until)
        return self._doc(request, {"room": room, "step": step,
                                   "points": [list(p) for p in points]})

    # -- operations ----------------------------------------------------------

    async def healthz(self, request: web.Request) -> web.StreamResponse:
        problem = await self.health()
        if problem is not None:
            return error_response(503, "unhealthy", problem, retry_after=1)
        return web.json_response({"status": "ok"})

    async def render_metrics(self, request: web.Request) -> web.StreamResponse:
        return web.Response(body=self.metrics.render(),
                            content_type="text/plain", charset="utf-8",
                            headers={"X-Content-Type": "prometheus-0.0.4"})
