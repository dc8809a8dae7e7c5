"""The proxy's aiohttp routes, and the middleware that shapes errors.

The listener path (poll, send, like) is served by the front
(:mod:`proxy.front`) on every connection it keeps; the routes here serve
everything else, and the listener path too on a connection the front handed
to aiohttp (its first request was not a poll, a send or a like), through the
same :mod:`proxy.polls.poll`, :mod:`proxy.sends.send` and
:mod:`proxy.likes.taps` as the front: the answers are the same bytes.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from aiohttp import web

from liveroom.clock import Clock
from liveroom.codec import decode_request, media_type
from liveroom.errors import Forbidden, LiveroomError, Unauthorized
from liveroom.metrics import Metrics
from liveroom.model import check_name, parse_count
from liveroom.roles import RoomReader, StatsReader
from liveroom.settings import Settings
from liveroom.snapshot import is_absent
from liveroom.store.base import RANKING_MAX

from ..auth import Right, Tokens, bearer
from ..bodies import read_body
from ..front.limits import FrontLimits, HeadRules
from ..front.routing import parse_query
from ..front.site import hold
from ..gifts.gifts import Gifts
from ..likes.likes import Likes
from ..likes.taps import Taps
from ..params import parse_members_page, parse_series_range
from ..polls.poll import Polls
from ..reply import Reply, failure_reply
from ..responses import document, error_response, response
from ..sends.send import Sends
from ..tickets import Tickets

logger = logging.getLogger("liveroom.proxy")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

OPENAPI = Path(__file__).parent.parent / "openapi.json"
"""The OpenAPI 3.1 document of the v1 API, served at ``/openapi.json``. A
plain file, not generated: what people and tools read, reviewed as the API's
change; tests/faces/test_openapi.py checks it against the routes both ways and
tests/faces/test_api_fuzz.py the server against it. Package data beside this
module, read at the first request for it (``importlib.resources`` would cost
every start 2 ms of imports for a file that is always there)."""
RANKING_DEFAULT = 10
"""Givers ``GET /leaderboard`` lists when it is not told how many."""
HEALTH_EVERY = 1.0
"""Seconds a ``/healthz`` answer is reused: a flood of health checks costs the
store one round trip a second."""


HEAD_LIMITS = FrontLimits()
"""The front's bounds on a request's head (its defaults: the node sets no others)."""

ONCE = ("Authorization", "Content-Type", "Content-Encoding", "Content-Length",
        "Transfer-Encoding", "Expect")
"""Headers a request may carry once (as on the front: two readers of the same
bytes could take different copies)."""


@web.middleware
async def errors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure becomes ``{"error", "message"}`` with its status; a
    request repeating a header of :data:`ONCE` is a 400 before any handler."""
    headers = request.headers
    raw = request.raw_headers
    if len(raw) > HEAD_LIMITS.max_headers or \
            sum(len(name) + len(value) for name, value in raw) > HEAD_LIMITS.max_header_bytes:
        # The front's bound on a whole head, not aiohttp's per line (8 KiB a line,
        # 128 lines): the same request is refused alike on either reader.
        return error_response(431, "headers_too_large",
                              f"at most {HEAD_LIMITS.max_headers} header lines and "
                              f"{HEAD_LIMITS.max_header_bytes} bytes of headers")
    for name in ONCE:
        if len(headers.getall(name, ())) > 1:
            return error_response(400, "bad_request", f"repeated header: {name} (send it once)")
    try:
        return await handler(request)
    except LiveroomError as exc:
        return response(failure_reply(exc))
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _http_error(request, exc)
    except Exception:
        logger.exception("unexpected error answering %s %s", request.method, request.path)
        return error_response(500, "internal", "internal error")


def _http_error(request: web.Request, exc: web.HTTPException) -> web.Response:
    """aiohttp's own refusals (no route, a method the route does not take) in
    the API's shape, saying what was asked, not only ``404: Not Found``."""
    code = exc.reason.lower().replace(" ", "_")
    path = request.path if len(request.path) <= 200 else request.path[:200] + "..."
    default = f"{exc.status}: {exc.reason}"
    if isinstance(exc, web.HTTPNotFound) and exc.text == default:
        message = f"no such route: {request.method} {path} (the API is at /openapi.json)"
    elif isinstance(exc, web.HTTPMethodNotAllowed):
        allowed = sorted(exc.allowed_methods)
        answer = error_response(405, code, f"{request.method} is not allowed on {path}: "
                                           f"use {', '.join(allowed)}")
        answer.headers["Allow"] = ",".join(allowed)
        return answer
    else:
        message = exc.text if exc.text and exc.text != default else exc.reason
    return error_response(exc.status, code, message)


class Routes:
    """The proxy's aiohttp routes: the listener path (for connections the
    front handed over), the room figures and the node's operations."""

    def __init__(self, *, settings: Settings, reader: RoomReader, polls: Polls, sends: Sends,
                 taps: Taps, likes: Likes, gifts: Gifts, stats: StatsReader,
                 tickets: Tickets | None,
                 is_vip: Callable[[str], bool],
                 clock: Clock, metrics: Metrics,
                 health: Callable[[], Awaitable[str | None]],
                 webhooks: Callable[[], dict[str, object]] | None = None) -> None:
        self.settings = settings
        self.webhooks = webhooks
        """This node's part in the webhooks' delivery, as /healthz says it
        (None: no ``--webhook``)."""
        self.reader = reader
        self.polls = polls
        self.sends = sends
        self.taps = taps
        self.likes = likes
        self.gifts = gifts
        self.stats = stats
        self.tickets = tickets
        """One verifier (one cache) for polls, sends and member lists; None: open."""
        self.is_vip = is_vip
        self.clock = clock
        self.metrics = metrics
        self.health = health
        """Returns None when healthy, else what is wrong."""
        self._openapi: bytes | None = None
        self._health: str | None = None
        self._health_at = float("-inf")
        self._health_check: asyncio.Future[str | None] | None = None

    @property
    def tokens(self) -> Tokens:
        return self.sends.tokens

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get("/v1/rooms/{room}/poll", self.poll)
        app.router.add_post("/v1/rooms/{room}/messages", self.send)
        app.router.add_post("/v1/rooms/{room}/likes", self.like)
        app.router.add_post("/v1/rooms/{room}/gifts", self.gift)
        app.router.add_get("/v1/rooms/{room}/leaderboard", self.leaderboard)
        app.router.add_get("/v1/rooms/{room}/online", self.online)
        app.router.add_get("/v1/rooms/{room}/stats", self.room_stats)
        app.router.add_get("/v1/rooms/{room}/stats/online", self.online_series)
        app.router.add_get("/v1/rooms/{room}/stats/likes", self.likes_series)
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/metrics", self.render_metrics)
        app.router.add_get("/openapi.json", self.openapi)

    # -- the listener path, for connections aiohttp serves ---------------------

    async def poll(self, request: web.Request) -> web.StreamResponse:
        answered: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()

        def reply(answer: Reply) -> None:
            if not answered.done():  # cancelled: the client left first
                answered.set_result(answer)

        headers = request.headers
        # The query as the front reads it, from the request's own bytes: aiohttp's
        # URL drops a fragment ("?uid=a#frag" would be uid "a" here and a 400 on
        # the front); both take the first of repeated names.
        query = parse_query(request.raw_path.partition("?")[2])
        poll = self.polls.start(request.match_info["room"], query,
                                headers.get("Accept", ""), reply, headers.get("Authorization"))
        if poll is not None:
            hold(request, poll)  # a half-close answers it at once
        try:
            return response(await answered)
        finally:
            if poll is not None:
                poll.cancel()  # the client left first (nothing happens once answered)

    async def _posted(self, request: web.Request,
                      rules: HeadRules) -> tuple[str, bytes]:
        """The room and body of a POST to a room (a send, a like, a gift), its
        head checked by its route's ``rules`` as the front checks it."""
        room = rules.check_head(request.match_info["room"],
                                request.headers.get("Content-Encoding"),
                                request.content_length)
        return room, await self._read_body(request, rules)

    async def _read_body(self, request: web.Request, rules: HeadRules) -> bytes:
        return await read_body(request, rules.body_limit, self.settings.request_timeout,
                               rules.too_large)

    async def send(self, request: web.Request) -> web.StreamResponse:
        headers = request.headers
        room, raw = await self._posted(request, self.sends.head_rules)
        return response(await self.sends.send(room, headers.get("Content-Type", ""), raw,
                                              headers.get("Authorization"),
                                              headers.get("Accept", ""), request.remote or ""))

    async def like(self, request: web.Request) -> web.StreamResponse:
        headers = request.headers
        room, raw = await self._posted(request, self.taps.head_rules)
        reply = self.taps.tap(room, headers.get("Content-Type", ""), raw,
                              headers.get("Authorization"), headers.get("Accept", ""))
        return response(reply if isinstance(reply, Reply) else await reply)

    # -- stats -----------------------------------------------------------------

    async def online(self, request: web.Request) -> web.StreamResponse:
        """A room's members. In ``ticket`` mode only for a ticket good for the
        room (any uid: a listener may see who listens with it) or the admin
        token, in the ``Authorization`` header or the ``ticket`` parameter."""
        room, offset, limit = parse_members_page(request.match_info["room"], request.query)
        if self.tickets is not None:
            header = request.headers.get("Authorization")
            token = bearer(header) if header is not None else request.query.get("ticket")
            if not token:
                raise Unauthorized("a member list needs a ticket for the room or the "
                                   "admin token: send Authorization: Bearer <ticket>")
            if self.tokens.right_of(token) is not Right.ADMIN:
                claims = self.tickets.claims(token)
                if claims.rooms is None or room not in claims.rooms:
                    raise Forbidden("a member list needs a ticket that names this room (an "
                                    "any-room ticket does not) or the admin token")
        if is_absent(await self.reader.snapshot(room)):
            # A room that does not exist has nobody: statsvr is not asked to
            # keep a view of a made-up name (one per name, for a read window).
            return document(request, {"room": room, "online": 0, "members": []})
        online, members = await self.stats.members(room, offset, limit)
        return document(request, {"room": room, "online": online, "members": members})

    async def room_stats(self, request: web.Request) -> web.StreamResponse:
        room = check_name("room", request.match_info["room"])
        snap = await self.reader.snapshot(room)
        if is_absent(snap):  # as for /online: nothing kept, nothing read for a made-up name
            return document(request, {
                "room": room, "online": 0, "viewers": 0, "viewers_exact": True,
                "vip": self.is_vip(room), "seq": 0, "likes": 0})
        figures = await self.stats.stats(room)
        likes = await self.likes.current(room)
        return document(request, {
            "room": room, "online": figures.online, "viewers": figures.viewers,
            "viewers_exact": figures.viewers_exact, "vip": self.is_vip(room),
            "seq": snap.head, "likes": likes,
        })

    async def gift(self, request: web.Request) -> web.StreamResponse:
        headers = request.headers
        room, raw = await self._posted(request, self.sends.head_rules)
        doc = decode_request(media_type(headers.get("Content-Type", "")), raw)
        rank, giver = await self.gifts.give(room, doc, headers.get("Authorization"))
        return document(request, {"room": room, "uid": giver, "rank": rank.rank,
                                  "score": rank.score, "total": rank.total}, status=201)

    async def leaderboard(self, request: web.Request) -> web.StreamResponse:
        query = request.query
        limit = parse_count("limit", query["limit"], 1, RANKING_MAX) \
            if "limit" in query else RANKING_DEFAULT
        room = request.match_info["room"]
        board = await self.gifts.ranking(room, limit)
        return document(request, {"room": room, "top": [
            {"uid": uid, "score": score} for uid, score in board.top],
            "total": board.total, "count": board.count})

    async def online_series(self, request: web.Request) -> web.StreamResponse:
        return await self._series(request, self.stats.online_series)

    async def likes_series(self, request: web.Request) -> web.StreamResponse:
        return await self._series(request, self.stats.likes_series)

    async def _series(self, request: web.Request,
                      read: Callable[[str, float, float],
                                     Awaitable[tuple[int, Sequence[Sequence[float]]]]],
                      ) -> web.StreamResponse:
        """A series of the room the request names, over its ``since`` and ``until``."""
        room, since, until = parse_series_range(request.match_info["room"], request.query,
                                                self.clock.time())
        step, points = await read(room, since, until)
        return document(request, {"room": room, "step": step,
                                   "points": [list(p) for p in points]})

    # -- operations ----------------------------------------------------------

    async def _health_now(self) -> str | None:
        """The node's health, checked at most once every :data:`HEALTH_EVERY`
        seconds (a check is a store round trip, one per master on a cluster):
        requests meanwhile share the last answer, or the check in flight."""
        now = asyncio.get_running_loop().time()
        if now - self._health_at < HEALTH_EVERY:
            return self._health
        check = self._health_check
        if check is None:
            check = self._health_check = asyncio.ensure_future(self._check_health())
        return await asyncio.shield(check)

    async def _check_health(self) -> str | None:
        try:
            problem = await self.health()
        finally:
            self._health_check = None
        self._health, self._health_at = problem, asyncio.get_running_loop().time()
        return problem

    async def healthz(self, request: web.Request) -> web.StreamResponse:
        problem = await self._health_now()
        if problem is not None:
            return error_response(503, "unhealthy", problem, retry_after=1)
        doc: dict[str, object] = {"status": "ok"}
        # The backend's circuit and the webhooks' lag are said, not judged: a
        # node whose backend fails still serves (sends get --send-hook-failure,
        # events wait in the outbox), and taking every node out of a balancer
        # for it would turn a backend's outage into a whole one.
        hook = self.sends.hook
        if hook is not None:
            doc["send_hook"] = hook.state
        if self.webhooks is not None:
            doc["webhooks"] = self.webhooks()
        return web.json_response(doc)

    async def openapi(self, request: web.Request) -> web.StreamResponse:
        """The API's OpenAPI document (read once, kept as bytes)."""
        if self._openapi is None:
            self._openapi = OPENAPI.read_bytes()
        return web.Response(body=self._openapi, content_type="application/json",
                            charset="utf-8")

    async def render_metrics(self, request: web.Request) -> web.StreamResponse:
        """Prometheus' text, for the bearer of ``metrics_token`` (unset: of the
        admin token); for anybody with ``metrics_public``."""
        if not self.settings.metrics_public:
            expected = self.settings.metrics_token or self.tokens.admin
            token = bearer(request.headers.get("Authorization"))
            if not hmac.compare_digest(token.encode(), expected.encode()):
                raise Unauthorized("/metrics needs Authorization: Bearer <the metrics token "
                                   "(--metrics-token), or the admin token when none is set>")
        return web.Response(body=self.metrics.render(),
                            content_type="text/plain", charset="utf-8",
                            headers={"X-Content-Type": "prometheus-0.0.4"})
