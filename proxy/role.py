"""The proxy role: the HTTP face of one node, assembled from what it is given.

:class:`Proxy` is the role's one entry point. The node gives it the other
roles through their interfaces (:mod:`liveroom.roles`: a room reader, a stats
reader, a heartbeat sink), the store's message log and operators, and the
settings; from them it builds what serves a listener (the holds, polls,
sends, tickets and the front), the operators' API and the pages, and hands
the node one aiohttp application and one listening site. The review queue
(:class:`~liveroom.review.ReviewQueue`) is the node's, given to the proxy:
its sender path holds messages in it, its moderators decide them.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Awaitable, Callable

from aiohttp import web

from liveroom.clock import Clock
from liveroom.errors import Banned, ConfigError
from liveroom.events import NO_EVENTS, Events
from liveroom.metrics import Metrics
from liveroom.ratelimit import UidWindows
from liveroom.review import ReviewQueue
from liveroom.roles import HeartbeatSink, RoomReader, StatsReader
from liveroom.settings import Settings
from liveroom.store.base import (
    Counters,
    FilterStore,
    MessageLog,
    ModerationStore,
    Operators,
    Outbox,
)
from liveroom.webhooks import Webhooks
from liveroom.whitelist import VipList

from .api.bounds import RouteBounds
from .api.operators import OperatorRoutes
from .api.pages import Pages
from .api.routes import Routes, errors_middleware
from .auth import Tokens
from .filters.lists import Filters
from .filters.routes import FilterRoutes
from .front.limits import UNSENT_MAX, WRITE_HIGH, FrontLimits
from .front.routing import LIKE, METHODS, POLL, ROUTES, SEND
from .front.server import Front
from .front.site import FrontSite
from .gifts.gifts import Gifts
from .gifts.ranking import Rankings
from .likes.likes import Likes
from .likes.route import LikeRoute
from .likes.taps import Taps
from .moderation.recall import Recalls
from .moderation.review import Reviews
from .moderation.routes import ModerationRoutes
from .moderation.rules import Moderation
from .polls.context import ContextSigner
from .polls.heartbeats import Heartbeats
from .polls.hold import Holds
from .polls.news import RoomNews
from .polls.poll import Polls
from .polls.route import PollRoute
from .polls.tiers import TierTable
from .recent_rooms import RecentRooms
from .renewals import Renewals
from .room_gate import RoomGate
from .route_costs import EXISTS, RouteCost, row_of
from .sends.hook import SendHook
from .sends.route import SendRoute
from .sends.send import Sends
from .tickets import Tickets
from .webhooks.routes import WebhookRoutes

logger = logging.getLogger("liveroom.proxy")


class Proxy:
    """The proxy of one node.

    ``settings`` must carry the tokens and the context secret (the node makes
    them up for the memory engine before it builds the proxy). ``health``
    returns ``None`` when the node is healthy, else what is wrong; ``vip_list``
    says which rooms are vip, and hears of the sect changes the operators' API
    just stored. ``review``: where a message a ``hold`` list of the word
    filter matched goes (none: such a send is refused, 503
    ``review_unavailable``).
    """

    def __init__(self, settings: Settings, *, reader: RoomReader, stats: StatsReader,
                 sink: HeartbeatSink, vip_list: VipList, log: MessageLog,
                 operators: Operators, counters: Counters, moderation: ModerationStore,
                 review: ReviewQueue, filters: FilterStore, clock: Clock, metrics: Metrics,
                 health: Callable[[], Awaitable[str | None]],
                 forget: Callable[[str, str], None] = lambda room, uid: None,
                 events: Events = NO_EVENTS, outbox: Outbox | None = None,
                 webhooks: Webhooks | None = None) -> None:
        self.settings = settings
        tokens = Tokens(admin=_given(settings.admin_token, "admin_token"),
                        publisher=_given(settings.publisher_token, "publisher_token"))
        signer = ContextSigner(_given(settings.secret, "secret"))
        # One process, one statsvr node: every heartbeat goes to ``sink``.
        self.heartbeats = Heartbeats([sink], clock, heartbeat_flush=settings.heartbeat_flush)
        tiers = TierTable(settings.tiers)
        self.holds = Holds(reader, clock, hold_tick=settings.hold_tick,
                           cut_through_every=settings.cut_through_every,
                           holds_per_listener=settings.holds_per_listener,
                           holds_per_uid=settings.holds_per_uid,
                           held_max=settings.held_max, metrics=metrics)
        # News of a room (its likes, top givers, slow mode) answers its
        # quiet held polls, at most once per room per period.
        self.news = RoomNews(self.holds, clock, tiers, stats.online,
                             news_every=settings.news_every, tick=settings.hold_tick)
        self.tickets = Tickets(settings.ticket_keys, clock, ticket_leeway=settings.ticket_leeway) \
            if settings.auth == "ticket" else None
        """One verifier (one cache) for polls, sends and member lists; None: open."""
        # What the cost table's rows ask of a route's room (a like in a room
        # that exists), asked of the room cache as a first poll asks it; and
        # the broadcast (epoch) the likes and rankings read are of.
        gate = RoomGate(reader)
        # The rooms asked about lately: the likes keep their totals fresh,
        # the ranking their top givers.
        recent = RecentRooms(settings.poll_timeout_max)
        # Renewed epochs (the same broadcast), as the room cache tells them.
        self.renewals = Renewals()
        self.likes = Likes(counters, clock, UidWindows(
            settings.likes_requests, settings.likes_taps, settings.likes_uids_max), recent,
            likes_flush=settings.likes_flush, likes_rooms_max=settings.likes_rooms_max,
            metrics=metrics, epoch_of=gate.epoch, root_of=gate.root, on_change=self.news.changed,
            renewals=self.renewals)
        self.ranking = Rankings(counters, clock, recent, epoch_of=gate.epoch,
                                on_change=self.news.changed, renewals=self.renewals)
        self._forget = forget
        self.moderation = Moderation(moderation, clock, on_ban=self._banned,
                                     on_slow=self.news.changed, metrics=metrics)
        self.polls = Polls(settings, reader, self.heartbeats, stats, self.holds, tiers,
                           signer, clock, metrics, is_vip=vip_list.is_vip, tickets=self.tickets,
                           likes=self.likes, ranking=self.ranking, rules=self.moderation.rules,
                           news=self.news)
        self.filters = Filters(filters, clock)
        self.send_hook = SendHook(settings, clock, metrics) if settings.send_hook else None
        """The backend's send hook (``--send-hook``), which screens untrusted sends."""
        self.sends = Sends(settings, log, tokens, clock, metrics, tickets=self.tickets,
                           moderation=self.moderation, filters=self.filters, review=review,
                           hook=self.send_hook)
        self.bounds = RouteBounds(gate)
        # A like's head is held to a send's bounds (a body of a few bytes
        # is far under them): one value, given to both routes.
        self.taps = Taps(self.likes, self.sends.head_rules, self.tickets,
                         gate=gate if _row(LIKE).room == EXISTS else None,
                         moderation=self.moderation, tokens=tokens)
        self.gifts = Gifts(counters, log, tokens, clock, gift_important=settings.gift_important,
                           tickets=self.tickets, metrics=metrics, events=events,
                           event_min=settings.webhook_gift_min)
        # The front's routes and their handlers: a new front route is a row
        # of proxy/front/routing.py and its handler here.
        handlers = {POLL: PollRoute(self.polls), SEND: SendRoute(self.sends),
                    LIKE: LikeRoute(self.taps)}
        for kind, handler in handlers.items():
            handler.finishes = _row(kind).finishes  # the cost table's, as on aiohttp
        self.front = Front(
            handlers,
            FrontLimits(
                header_timeout=settings.header_timeout, request_timeout=settings.request_timeout,
                keepalive_timeout=settings.keepalive_timeout,
                connections_max=settings.connections_max,
                connections_per_ip=settings.connections_per_ip,
                trusted_proxies=settings.trusted_proxies, write_timeout=settings.write_timeout,
                unsent_max=unsent_max(settings), send_buffer=settings.send_buffer),
            on_shed=lambda reason: metrics.shed_connections.labels(reason).inc(),
            on_refused=metrics.refused_connections.inc)
        metrics.track(metrics.connections, lambda: self.front.open_connections)
        metrics.track(metrics.held_polls, self.held_polls)
        self.routes = Routes(settings=settings, reader=reader, polls=self.polls,
                             sends=self.sends, taps=self.taps, likes=self.likes,
                             gifts=self.gifts, stats=stats,
                             tickets=self.tickets,
                             is_vip=vip_list.is_vip, clock=clock, metrics=metrics,
                             health=health,
                             webhooks=None if webhooks is None else lambda: webhooks.state)
        self.recalls = Recalls(log, tokens, self.moderation, clock,
                               recall_window=settings.recall_window, tickets=self.tickets,
                               windows=settings.rate_limits.per_uid, events=events)
        self.reviews = Reviews(review.store, log, self.moderation, clock, events=events)
        self.moderators = ModerationRoutes(self.moderation, moderation, tokens, clock,
                                           self.recalls, operators, reader, self.reviews,
                                           events=events)
        self.operators = OperatorRoutes(operators, tokens, clock, settings, stats=stats,
                                        reader=reader, log=log, vip_list=vip_list,
                                        events=events)
        self.filter_routes = FilterRoutes(self.filters, filters, tokens, clock, settings)
        self.webhook_routes = WebhookRoutes(outbox, tokens, webhooks,
                                            settings.request_timeout)

    def renewed(self, room: str, old: str, new: str) -> None:
        """The room's epoch ``old`` was renewed into ``new`` (the same
        broadcast): its likes total and top givers are ``new``'s too."""
        self.renewals.note(room, old, new)
        self.likes.renewed(room, old, new)
        self.ranking.renewed(room, old, new)

    def _banned(self, room: str, uid: str, refusal: Banned) -> None:
        """A ban this node learnt of: the uid's held polls here are answered
        with ``refusal`` (403 ``banned``) and its presence is dropped."""
        refused = self.polls.refuse_listener(room, uid, refusal)
        self._forget(room, uid)
        if refused:
            logger.info("answered %d held polls of banned uid %s in room %s", refused, uid, room)

    @property
    def tokens(self) -> Tokens:
        return self.sends.tokens

    def held_polls(self) -> int:
        """Polls held now."""
        return self.holds.count

    def application(self) -> web.Application:
        """The node's aiohttp application with every route of the API and the
        pages, the errors middleware, and held polls answered at shutdown."""
        app = web.Application(middlewares=[errors_middleware, self.bounds.middleware],
                              client_max_size=self.sends.head_rules.body_limit)
        self.routes.add_routes(app)
        self.operators.add_routes(app)
        self.moderators.add_routes(app)
        self.filter_routes.add_routes(app)
        self.webhook_routes.add_routes(app)
        Pages().add_routes(app)
        app.on_response_prepare.append(_our_server_header)
        app.on_shutdown.append(self._release)
        return app

    def site(self, runner: web.AppRunner, host: str | None, port: int, *,
             sock: socket.socket | None = None, reuse_port: bool = False) -> FrontSite:
        """The listening socket: the front, handing aiohttp what is not a
        poll, a send or a like (call after ``runner.setup()``, then ``start()``)."""
        return FrontSite(runner, self.front, host, port, sock=sock, reuse_port=reuse_port)

    async def start(self) -> None:
        """Start handing heartbeats to statsvr (before the first poll) and
        likes to the store, reading the rooms' gift rankings, their
        moderation and the word filter's lists, telling held polls the
        rooms' news, and open the send hook's connections (before the first
        send)."""
        if self.send_hook is not None:
            await self.send_hook.start()
        await self.heartbeats.start()
        self.news.start()
        self.likes.start()
        self.ranking.start()
        await self.moderation.start()
        await self.filters.start()

    async def stop(self) -> None:
        """Answer and drop every held poll, write the last likes, close the
        send hook's connections (a send still waiting gets the failure
        policy), then hand over the last heartbeats."""
        await self.news.stop()
        await self.holds.close()
        if self.send_hook is not None:
            await self.send_hook.stop()
        await self.likes.stop()
        await self.ranking.stop()
        await self.moderation.stop()
        await self.filters.stop()
        await self.heartbeats.stop()

    async def _release(self, app: web.Application) -> None:
        """Answer held polls, then let the front's requests in progress finish
        (within the runner's shutdown grace) and close its connections."""
        self.holds.release_all()
        await self.front.shutdown(self.settings.shutdown_grace)
        await self.bounds.drain(self.settings.shutdown_grace)


def _row(kind: int) -> RouteCost:
    """The cost table's row of the front's route ``kind``."""
    return row_of(METHODS[kind].decode(), "/v1/rooms/{room}" + ROUTES[kind - 1][0])


def unsent_max(settings: Settings) -> int:
    """Unsent bytes past which a connection is aborted: :data:`~.front.limits.UNSENT_MAX`,
    or the high-water mark and two of the largest answers these settings
    allow (a budget's worth of messages and one more message) if that is more."""
    return max(UNSENT_MAX, WRITE_HIGH + 2 * (settings.answer_bytes_max
                                             + settings.max_message_bytes))


def _given(value: str | None, name: str) -> str:
    if not value:
        raise ConfigError(name, f"the proxy needs {name} (the node makes it up on memory)")
    return value


async def _our_server_header(request: web.Request, response: web.StreamResponse) -> None:
    """aiohttp's answers name liveroom, as the front's do (not Python's version)."""
    response.headers["Server"] = "liveroom"
