"""A send from its request to its answer, without HTTP: the sender path.

A send is checked in two steps, so a server can refuse a request before
reading its body: its :attr:`Sends.head_rules` (the room, a compressed body, a
declared length over the limit), then :meth:`Sends.send` with the body read
(its format, its fields, the token, the append). Both the front and aiohttp's
routes call them, in that order, and answer what they return or raise.

**Who sends.** In ``open`` mode the body names the uid, and a bearer token
(publisher or admin) is needed for an important message only. In ``ticket``
mode every send carries ``Authorization: Bearer``: the publisher or admin
token (the business backend, speaking for the uid its body names: a user or
"system"), or a ticket good for the room, whose ``sub`` is the uid (a body
naming another uid is refused, 401) and whose ``publish`` claim allows an
important message, personal ones too (403 without it). Ticket holders are rate limited like any
sender, per their ticket's uid; the backend's tokens are not.

**What a send may create**: see :mod:`.new_rooms` (new rooms per uid, per
client address, per node; a place held before the append, freed when it
created nothing).

**Held for review.** A send that a word filter or the backend's send hook
keeps back is not stored: it goes to the room's review queue
(:attr:`Sends.review`, ``ReviewQueue.hold``) and its sender is answered
202 ``{"held": "<id>"}`` (:func:`held_reply`); a moderator approves it
(stored then, as its sender's) or denies it. Nobody but its sender and the
moderators knows of it.
**The word filter** (:mod:`proxy.filters`) screens every send but the
backend's tokens' (a ticket's important and personal sends included),
after moderation and before the new-room windows: a ``block`` list's word
refuses it (403 ``filtered``), a ``mask`` list's is stored masked, and a
``hold`` list's goes to the node's review queue
(:class:`~liveroom.review.ReviewQueue`), answered 202 ``{"held": id}``
(503 ``review_unavailable`` on a node without one). A room no list applies
to costs one dict lookup.

**The send hook** (:mod:`.hook`, ``--send-hook``): with it on, every send
but the backend's tokens' goes to the backend after the checks above and
before the append, and waits for its verdict (``--send-hook-timeout`` at
most): accept (stored, its body maybe the backend's, its ``extra``
delivered with it), reject (403 ``rejected``, the backend's reason) or hold
(the review queue, 202). A late or failing backend: ``--send-hook-failure``
decides (reject is a 503 ``send_hook_unavailable``). A sender the store
refused for its rate limits is refused again at once, without a call, until
its windows free (:mod:`.limited`). A send rejected or held creates no room
and counts in no rate window.

**Personal messages are private in ticket mode only.** A poll in ``open``
mode names its uid and proves nothing, so anybody can read ``uid=alice``'s
personal messages. They are accepted there (the quick start uses them), and
a personal send's answer carries ``"private": false`` (``true`` in ticket
mode, where only a ticket naming the uid reads them).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from functools import partial
from typing import Any, Final, NoReturn

import orjson

from liveroom.clock import Clock
from liveroom.codec import decode_request_bounded, media_type, wants_msgpack
from liveroom.errors import (
    Banned,
    Filtered,
    Forbidden,
    Muted,
    NewRoomRefused,
    RateLimited,
    Rejected,
    ReviewUnavailable,
    SendHookUnavailable,
    StoreUnavailable,
    Unauthorized,
)
from liveroom.metrics import Metrics
from liveroom.model import NewMessage
from liveroom.ratelimit import RateLimits
from liveroom.review import ReviewQueue
from liveroom.settings import Settings
from liveroom.store.base import AppendAtOnce, Appended, MessageLog
from liveroom.store.review import WHY_MAX

from ..addresses import peer_address
from ..auth import Right, Tokens, bearer
from ..filters.lists import Filters
from ..filters.screen import BLOCK, HOLD
from ..front.limits import HeadRules
from ..moderation.rules import Moderation
from ..params import parse_send
from ..reply import JSON_UTF8, Reply, answer_to, document_reply
from ..tickets import UID_MISMATCH, Claims, Tickets
from .hook import ACCEPT, REJECT, Screened, SendHook
from .limited import LimitedSenders
from .new_rooms import NewRooms, Place

logger: Final = logging.getLogger("liveroom.proxy")
_dumps: Final = orjson.dumps
"""Bound once: compiled code looks a module's attribute up at each call."""


def send_heads(settings: Settings) -> HeadRules:
    """What a send's head may be under ``settings``: its body a message
    (``max_message_bytes``) plus its fields."""
    return HeadRules(settings.max_message_bytes + 1024)


class Sends:
    """The sender path of one node."""

    def __init__(self, settings: Settings, log_: MessageLog, tokens: Tokens, clock: Clock,
                 metrics: Metrics, *, tickets: Tickets | None = None,
                 moderation: Moderation | None = None, filters: Filters | None = None,
                 review: ReviewQueue | None = None, hook: SendHook | None = None) -> None:
        self.settings = settings
        self._log = log_
        self.tokens = tokens
        """The configured (or, on memory, made up) tokens; never replaced."""
        self.tickets = tickets
        """The ticket verifier in ``ticket`` mode; None: open."""
        self.moderation = moderation
        """The node's moderation: a muted or banned uid's sends are refused,
        a slow room's counted in one more window (None: none)."""
        self.filters = filters
        """The node's word lists (None: no filter)."""
        self.review = review
        """Where a send kept back for review is held (``await
        review.hold(room, message, why)``, then :func:`held_reply`); None:
        none (a held send is refused, 503 ``review_unavailable``)."""
        self.hook = hook
        """The backend's send hook, which screens every untrusted send (None: off)."""
        self.limited = LimitedSenders()
        """Senders the store refused for their rate limits lately (the hook's peek)."""
        self._clock = clock
        self._metrics = metrics
        self._tally = metrics.tally(
            [*(metrics.sends.labels(o) for o in ("stored", "duplicate", "limited", "unavailable")),
             metrics.store_errors.labels("append"),
             *(metrics.sends.labels(o) for o in ("muted", "banned", "filtered", "held")),
             metrics.masked_sends, metrics.sends.labels("rejected")])
        # A wrapper that hands other calls on to a log (by __getattr__) is not
        # taken for one that appends at once: its append is its own.
        self._append_at_once: AppendAtOnce | None = (
            log_.append_at_once if hasattr(type(log_), "append_at_once")  # type: ignore[attr-defined]
            else None)
        self.screens_at_once = hook is not None and self._append_at_once is not None
        """Whether a screened send is answered by :meth:`send_screened` (the
        store appends at once) rather than by :meth:`send`."""
        self._holding: set[asyncio.Task[Reply]] = set()
        """Sends the hook held, on their way to the review queue (:meth:`send_screened`)."""
        self.new_rooms = NewRooms(settings.rooms_per_uid, settings.rooms_per_node,
                                  settings.rooms_per_address)
        # Read once: settings are a plain class, each read a lookup by name.
        self._max_body = settings.max_message_bytes
        limits = settings.rate_limits
        self._limits: RateLimits | None = None if limits is None or limits.off else limits
        self.head_rules = send_heads(settings)
        """What a send's head may be (:func:`send_heads`)."""

    def send_at_once(self, room: str, content_type: str, raw: bytes,
                     authorization: str | bytes | None, accept: str, address: str,
                     peer: asyncio.BaseTransport | None = None) -> Reply | None:
        """The answer of a send (as :meth:`send`'s) when the store appends
        without waiting (the memory engine): no task, no await. ``None``
        when the store may wait (Redis), when the message goes to review
        (the queue may wait), or when the send hook screens it: await
        :meth:`send` instead (it checks the send again: a held one costs its
        checks twice)."""
        if self._append_at_once is None or (self.hook is not None
                                            and not self.from_backend(authorization)):
            return None
        try:
            pending = self._prepare(room, content_type, raw, authorization, address, peer,
                                    admit=False)
            if pending.held:
                return None
            try:
                appended = self._append_now(room, pending, address, peer)
            except BaseException as exc:
                self._failed(pending, exc)
            return self._stored(pending, appended, accept)
        except Exception as exc:
            self._refused(exc)
            return answer_to(exc, logger, "a send to room %s failed", room)

    async def send(self, room: str, content_type: str, raw: bytes,
                   authorization: str | bytes | None, accept: str, address: str,
                   peer: asyncio.BaseTransport | None = None) -> Reply:
        """Append the message in ``raw`` to ``room``; the answer (201 or an error).
        ``address`` is the client's as the node sees it (its new-room window);
        ``""`` with ``peer``: the peer's address, read only if a new-room
        window needs it (not for the backend)."""
        try:
            pending = self._prepare(room, content_type, raw, authorization, address, peer)
            if pending.held:
                return await self._hold(room, pending, accept)
            if pending.screen:
                held = await self._screened(room, pending, accept)
                if held is not None:
                    return held
            try:
                appended = await self._log.append(
                    room, pending.message, pending.limits, may_create=pending.may_create,
                    provisional=pending.provisional)
            except BaseException as exc:
                self._append_failed(room, pending, exc)
            return self._stored(pending, appended, accept)
        except Exception as exc:
            self._refused(exc)
            return answer_to(exc, logger, "a send to room %s failed", room)

    def send_screened(self, room: str, content_type: str, raw: bytes,
                      authorization: str | bytes | None, accept: str, address: str,
                      peer: asyncio.BaseTransport | None,
                      answer: Callable[[Reply], None]) -> Reply | Coroutine[Any, Any, Reply] | None:
        """A send the hook screens, when the store appends at once
        (:attr:`screens_at_once`; not the backend's: :meth:`from_backend`):
        its checks now, then no task and no coroutine while it waits. Its
        answer now when it needs no call (refused, the circuit open), the
        coroutine to run when a word list holds it, else None: ``answer``
        takes it once the verdict came (its append done then, as
        :meth:`send`'s after its ``await``). A send the hook holds goes to
        the review queue in a task of its own (the queue may wait).

        Nothing cancels it: a send whose client left is still decided and
        stored, its answer going nowhere (the front makes a send's task
        finish likewise), and a node that stops gives it the failure
        policy's verdict (:meth:`SendHook.stop`) before its store closes."""
        hook = self.hook
        assert hook is not None
        try:
            # No place in the new-room windows yet: it is taken when the
            # verdict comes, right before the append, if the room is not
            # there then (as :meth:`send_at_once` does); the backend sees
            # the client's address all the same.
            pending = self._prepare(room, content_type, raw, authorization, address, peer,
                                    admit=False)
            if pending.held:
                return self._held_send(room, pending, accept)
            if not pending.address:
                pending.address = peer_address(peer)
            verdict = hook.ask(room, pending.message, pending.address, pending.claims,
                               partial(self._verdict_came, room, pending, accept, answer))
            if verdict is None:
                return None
            return self._decided(room, pending, accept, verdict, answer)
        except Exception as exc:
            self._refused(exc)
            return answer_to(exc, logger, "a send to room %s failed", room)

    def _verdict_came(self, room: str, pending: _Pending, accept: str,
                      answer: Callable[[Reply], None], verdict: Screened) -> None:
        """The hook's verdict on a send of :meth:`send_screened`: answered."""
        reply = self._decided(room, pending, accept, verdict, answer)
        if reply is not None:
            answer(reply)

    def _decided(self, room: str, pending: _Pending, accept: str, verdict: Screened,
                 answer: Callable[[Reply], None]) -> Reply | None:
        """What :meth:`send_screened`'s send answers with ``verdict``: stored
        (the store appends at once), refused, or None when the hook holds it
        (``answer`` takes its answer once the review queue has it)."""
        try:
            if not self._judged(pending, verdict):
                task = asyncio.get_running_loop().create_task(
                    self._hold_judged(room, pending, accept, verdict))
                self._holding.add(task)
                task.add_done_callback(partial(self._held_by_hook, room, answer))
                return None
            try:
                appended = self._append_now(room, pending, pending.address, None)
            except BaseException as exc:
                self._append_failed(room, pending, exc)
            return self._stored(pending, appended, accept)
        except Exception as exc:
            self._refused(exc)
            return answer_to(exc, logger, "a send to room %s failed", room)

    def _append_now(self, room: str, pending: _Pending, address: str,
                    peer: asyncio.BaseTransport | None) -> Appended:
        """Append ``pending`` on a store that appends without waiting (the
        memory engine). Nothing runs between its appends: a room that exists
        needs no place in the new-room windows (the place would be held and
        freed unseen), one that does not gets its place right before its
        append, as :meth:`send` takes it before its own."""
        append = self._append_at_once
        assert append is not None
        if pending.provisional:
            try:
                return append(room, pending.message, pending.limits, may_create=False,
                              provisional=True)
            except NewRoomRefused:
                self._admit(pending, address, peer)
        return append(room, pending.message, pending.limits, may_create=pending.may_create,
                      provisional=pending.provisional)

    def _held_by_hook(self, room: str, answer: Callable[[Reply], None],
                      task: asyncio.Task[Reply]) -> None:
        self._holding.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is None:
            answer(task.result())
        elif isinstance(exc, Exception):
            answer(answer_to(exc, logger, "a send to room %s failed", room))

    async def _held_send(self, room: str, pending: _Pending, accept: str) -> Reply:
        """:meth:`_hold` with :meth:`send`'s answer to what it raises."""
        try:
            return await self._hold(room, pending, accept)
        except Exception as exc:
            self._refused(exc)
            return answer_to(exc, logger, "a send to room %s failed", room)

    def _append_failed(self, room: str, pending: _Pending, exc: BaseException) -> NoReturn:
        """The append of ``pending`` raised ``exc``: a screened sender's rate
        limits remembered (the hook's peek), then as :meth:`_failed`."""
        if pending.screen and isinstance(exc, RateLimited) \
                and pending.limits is not None and not isinstance(exc, NewRoomRefused):
            self.limited.refused(room, pending.message.uid, pending.limits,
                                 pending.message.ts, exc.retry_after)
        self._failed(pending, exc)

    def _prepare(self, room: str, content_type: str, raw: bytes,
                 authorization: str | bytes | None, address: str,
                 peer: asyncio.BaseTransport | None, *, admit: bool = True) -> _Pending:
        """Everything before the append: the credential, the body, the
        message, and (``admit``) its place in the new-room windows (raises a
        4xx); without ``admit``, a sender's send has none yet
        (:meth:`_admit` takes it)."""
        tickets = self.tickets
        if tickets is None:
            doc, bound = decode_request_bounded(media_type(content_type), raw)
            sp = parse_send(doc, max_body=self._max_body, size_bound=bound)
            # The business backend (publisher or admin token) is not rate limited;
            # a token that is sent must be right, even where none is needed.
            trusted = sp.important or authorization is not None
            if trusted:
                self.tokens.require(authorization, Right.PUBLISH)
            uid = sp.uid
            claims = None
        else:
            # The credential first: a sender without one costs no body decoding.
            # A viewer's ticket seen before is found by its header as it came.
            claims = None if type(authorization) is not bytes \
                else tickets.of_header(room, authorization)
            if claims is not None:
                trusted = False
            else:
                token = bearer(authorization)
                trusted = self.tokens.right_of(token) is not None
                claims = None if trusted else tickets.good_for(room, token, None)
            doc, bound = decode_request_bounded(media_type(content_type), raw)
            sp = parse_send(doc, max_body=self._max_body,
                            uid_required=trusted, size_bound=bound)
            uid = sp.uid
            if claims is not None:
                if uid is not None and uid != claims.uid:
                    raise Unauthorized(UID_MISMATCH)
                if sp.important and not claims.publish:
                    raise Forbidden("this ticket cannot send important messages "
                                    "(it has no publish right)")
                uid = claims.uid
        assert uid is not None  # parse_send required it where no ticket names it
        message = NewMessage(uid=uid, body=sp.body, important=sp.important,
                             ts=int(self._clock.time() * 1000), client_msg_id=sp.client_msg_id,
                             to=sp.to)
        if trusted:
            return _Pending(message, None, None, None, False)
        limits = self._limits
        moderation = self.moderation
        if moderation is not None and room in moderation.rules:  # mute, ban, slow mode
            limits = moderation.send_limits(room, uid, limits, message.important)
        screens = None if self.filters is None else self.filters.screens
        if screens is not None and screens.lists:  # no list at all: nothing more
            screened = screens.screen(room, message.body)
            if screened is not None:
                if screened.action == BLOCK:
                    raise Filtered(f"the message holds a word room {room} does not allow")
                if screened.action == HOLD:
                    return _Pending(message, limits, None, None, True, screened.lists)
                message.body = screened.body
                self._tally[_MASKED] += 1
        screen = self.hook is not None
        if screen:  # a sender the store refused lately costs the backend no call
            self.limited.check(room, uid, limits, message.ts)
        pending = _Pending(message, limits, None, None, True, screen=screen, address=address,
                           claims=claims)
        if admit:
            self._admit(pending, address, peer)
        return pending

    def _admit(self, pending: _Pending, address: str,
               peer: asyncio.BaseTransport | None) -> None:
        """Take ``pending``'s place in the new-room windows, or learn it may
        create no room: before the append's round trip, so sends in flight
        together never pass the windows; settled after it."""
        address = address or peer_address(peer)
        admitted = self.new_rooms.reserve(pending.message.uid, address, pending.message.ts)
        pending.address = address
        pending.admitted = admitted
        pending.place = admitted if isinstance(admitted, Place) else None
        pending.may_create = pending.place is not None

    def from_backend(self, authorization: str | bytes | None) -> bool:
        """Whether a send with ``authorization`` is the backend's (a token,
        not a ticket): the send hook does not screen it. A wrong token is
        refused by the send itself."""
        if authorization is None:
            return False
        if self.tickets is None:
            return True  # open mode: any token a send carries must be the backend's
        try:
            return self.tokens.right_of(bearer(authorization)) is not None
        except Unauthorized:
            return False

    async def _screened(self, room: str, pending: _Pending, accept: str) -> Reply | None:
        """The send hook's verdict on ``pending``: None to store it (its
        message now the backend's, when it rewrote it), else the answer of a
        send held (202); raises the refusal of one rejected. A send not
        stored frees its new room's place."""
        hook = self.hook
        assert hook is not None
        try:
            verdict = await hook.screen(room, pending.message, pending.address, pending.claims)
        except BaseException:
            self._unplaced(pending)
            raise
        if self._judged(pending, verdict):
            return None
        return await self._hold_judged(room, pending, accept, verdict)

    def _judged(self, pending: _Pending, verdict: Screened) -> bool:
        """Whether ``verdict`` stores ``pending`` (True: its message now the
        backend's, when it rewrote it) or holds it (False); raises the
        refusal of one rejected. A send not stored frees its new room's place."""
        if verdict.action == ACCEPT:
            if verdict.body is not None or verdict.extra is not None:
                message = pending.message
                pending.message = NewMessage(
                    message.uid, message.body if verdict.body is None else verdict.body,
                    message.important, message.ts, message.client_msg_id, message.to,
                    verdict.extra)
            return True
        self._unplaced(pending)
        if verdict.action == REJECT:
            if verdict.fallback:
                raise SendHookUnavailable(f"the send hook could not screen this message "
                                          f"({verdict.reason}); retry")
            self._tally[_REJECTED] += 1
            raise Rejected(verdict.reason or "the backend rejected this message")
        return False

    async def _hold_judged(self, room: str, pending: _Pending, accept: str,
                           verdict: Screened) -> Reply:
        """A send the hook holds, handed to the review queue: the answer."""
        review = self.review
        if review is None:
            raise SendHookUnavailable("the send hook holds this message and this node has "
                                      "no review queue")
        why = f"hook: {verdict.reason}"[:WHY_MAX] if verdict.reason else "hook"
        held = await review.hold(room, pending.message, why)
        self._tally[_HELD] += 1
        return held_reply(held, accept)

    def _unplaced(self, pending: _Pending) -> None:
        """A send that will not be stored frees its new room's place."""
        if pending.place is not None:
            self.new_rooms.settled(pending.place, None)
            pending.place = None

    async def _hold(self, room: str, pending: _Pending, accept: str) -> Reply:
        """A message a ``hold`` list matched, handed to the review queue."""
        review = self.review
        if review is None:
            raise ReviewUnavailable("the message holds a word that sends it to review, and "
                                    "this node has no review queue")
        why = f"word lists: {', '.join(pending.held)}"
        if len(why) > WHY_MAX:
            why = why[:WHY_MAX - 1] + "…"
        held = await review.hold(room, pending.message, why)
        self._tally[_HELD] += 1
        return held_reply(held, accept)

    def _refused(self, exc: Exception) -> None:
        """Count a muted, banned or filtered sender's refusal (a spam wave's
        mark)."""
        if isinstance(exc, Muted):
            self._tally[_MUTED] += 1
        elif isinstance(exc, Banned):
            self._tally[_BANNED] += 1
        elif isinstance(exc, Filtered):
            self._tally[_FILTERED] += 1

    def _failed(self, pending: _Pending, exc: BaseException) -> NoReturn:
        """The append raised ``exc``: count it, free the new room's place, and
        raise what the sender is told."""
        if pending.place is not None:
            self.new_rooms.settled(pending.place, None)
        tally = self._tally
        if isinstance(exc, NewRoomRefused):
            tally[_LIMITED] += 1
            assert isinstance(pending.admitted, RateLimited)
            raise pending.admitted from None
        if isinstance(exc, RateLimited):
            tally[_LIMITED] += 1
        elif isinstance(exc, StoreUnavailable):
            tally[_UNAVAILABLE] += 1
            tally[_APPEND_ERRORS] += 1
        raise exc

    def _stored(self, pending: _Pending, appended: Appended, accept: str) -> Reply:
        """The append returned: count it, settle the new room's place, answer."""
        message = pending.message
        if pending.place is not None:
            self.new_rooms.settled(pending.place, message.ts if appended.created else None)
        self._tally[_DUPLICATE if appended.duplicate else _STORED] += 1
        to = message.to
        # In open mode a poll names its uid and proves nothing: anybody can
        # read anybody's personal messages, and the answer says so.
        private = self.tickets is not None
        if wants_msgpack(accept):
            answer: dict[str, object] = (
                {"seq": appended.seq, "epoch": appended.epoch} if to is None else
                {"pseq": appended.seq, "epoch": appended.epoch, "to": to, "private": private})
            return document_reply(answer, use_msgpack=True, status=201)
        # The JSON orjson would write for the same dict, without the dict.
        if to is None:
            body = b'{"seq":%d,"epoch":%b}' % (appended.seq, _dumps(appended.epoch))
        else:
            body = b'{"pseq":%d,"epoch":%b,"to":%b,"private":%b}' % (
                appended.seq, _dumps(appended.epoch), _dumps(to),
                b"true" if private else b"false")
        return Reply(201, body, JSON_UTF8)


def held_reply(held_id: str, accept: str) -> Reply:
    """The answer to a send held for review: 202 ``{"held": "<id>"}`` (its id
    in the room's review queue), in the format the sender asked for."""
    if wants_msgpack(accept):
        return document_reply({"held": held_id}, use_msgpack=True, status=202)
    return Reply(202, b'{"held":%b}' % _dumps(held_id), JSON_UTF8)


_STORED: Final = 0
_DUPLICATE: Final = 1
_LIMITED: Final = 2
_UNAVAILABLE: Final = 3
_APPEND_ERRORS: Final = 4
_MUTED: Final = 5
_BANNED: Final = 6
_FILTERED: Final = 7
_HELD: Final = 8
_MASKED: Final = 9
_REJECTED: Final = 10


class _Pending:
    """A send between its checks and its append's answer."""

    __slots__ = ("address", "admitted", "claims", "held", "limits", "may_create", "message",
                 "place", "provisional", "screen")

    def __init__(self, message: NewMessage, limits: RateLimits | None,
                 admitted: Place | RateLimited | None, place: Place | None,
                 provisional: bool, held: tuple[str, ...] = (), *, screen: bool = False,
                 address: str = "", claims: Claims | None = None) -> None:
        self.message = message
        self.limits = limits
        """The sender's windows (None: the backend, or limits off)."""
        self.admitted = admitted
        """What the new-room windows said: a place held, a refusal (the room
        must exist), or None (not asked: the backend, or no new-room limit)."""
        self.place = place
        self.may_create = admitted is None or place is not None
        self.provisional = provisional
        self.held = held
        """The ``hold`` lists whose words it holds (empty: not held)."""
        self.screen = screen
        """The send hook screens it before its append."""
        self.address = address
        """The client's address (the hook's ``address``)."""
        self.claims = claims
        """Its ticket's claims (ticket mode), for the hook."""
