"""The send hook: the business backend screens every untrusted send before
it is stored (``--send-hook URL``; docs/api.md, "The send hook").

**What is screened.** A send that the sender path would store, once its own
checks passed (the credential, the body, moderation, the rate limits this
node knows of, the new-room windows): a viewer's chat, and a ticket's
important and personal sends. The backend's own sends (the publisher or
admin token) are never screened.

**A call.** ``POST URL`` with ``{"messages": [{"id", "room", "uid", "kind",
"to", "body", "client_msg_id", "address", "claims"}, ...]}``, signed
(``Liveroom-Signature``, :mod:`liveroom.signature`, with
``--send-hook-secret``). The backend answers 200 ``{"results": [{"id",
"action", "body"?, "extra"?, "reason"?}, ...]}``, one per message, in any
order (:func:`verdicts` reads it).

**Batches.** Sends are queued, not called one by one: the first send
while no call is in flight leaves at the end of the loop's turn, with
whatever else arrived in that turn; sends that arrive while calls are in
flight wait for one to end and go together in the next; a full batch
(``--send-hook-batch``) leaves at once if fewer than ``--send-hook-calls``
calls are in flight. So a node under 10 000 sends a second makes a few
hundred calls, and an idle one answers a lone send after one round trip.

**Time.** A send waits at most ``--send-hook-timeout`` from the moment it
was queued (its wait for a call included); a call is given up after as
long. Past it, or when the call fails, ``--send-hook-failure`` decides for
the send: accept it as sent, reject it (503, temporary) or hold it for a
moderator. A verdict that comes after its sender stopped waiting is
dropped.

**The circuit** (:mod:`.circuit`): ``--send-hook-trip`` failed calls in a
row open it; while open, no call is made and every screened send gets the
failure policy at once; after ``--send-hook-cooldown`` one send is the
trial. Its state is in ``/healthz`` (``"send_hook"``), the metrics
(``liveroom_send_hook_circuit_open``) and one log line when it opens, one
when it closes.

**Connections.** One :class:`~liveroom.origin.Origin` a node, a keep-alive
pool of ``--send-hook-calls`` HTTP/1.1 connections (one write a call,
httptools on the answer), made by
:meth:`SendHook.start` and closed by :meth:`SendHook.stop` (the proxy's
start and stop). A call
task is the hook's: stopped with it, and the sends it carried then get the
failure policy.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections import deque
from collections.abc import Callable, Collection
from functools import partial
from typing import Any, Final

import orjson

from liveroom.clock import Clock
from liveroom.codec import check_value, json_size
from liveroom.errors import BadBody
from liveroom.lograte import Throttled
from liveroom.metrics import Metrics
from liveroom.model import NewMessage
from liveroom.origin import Origin
from liveroom.settings import Settings
from liveroom.signature import HEADER, sign
from liveroom.store.review import WHY_MAX, held_kind

from ..tickets import Claims
from .circuit import Circuit

logger: Final = logging.getLogger("liveroom.proxy.send_hook")

ACCEPT: Final = "accept"
REJECT: Final = "reject"
HOLD: Final = "hold"
ACTIONS: Final = (ACCEPT, REJECT, HOLD)
REASON_MAX: Final = WHY_MAX
"""Characters of a verdict's reason kept (the rest is cut): it is a held
message's ``why`` and a rejected sender's message."""

LATE: Final = "late"
"""The send waited ``--send-hook-timeout`` without a verdict."""
FAILED: Final = "failed"
"""Its call failed (no answer, not 200, not a verdict for it)."""
CIRCUIT: Final = "circuit"
"""The circuit was open: no call was made."""
STOPPED: Final = "stopped"
"""The node stopped while it waited."""
FALLBACKS: Final = (LATE, FAILED, CIRCUIT, STOPPED)
FALLBACK_REASONS: Final = {LATE: "the backend was late", FAILED: "the backend's call failed",
                           CIRCUIT: "the backend's circuit is open",
                           STOPPED: "the node is stopping"}
"""A failure policy's verdict's ``reason``, by why it decided."""
VERDICTS: Final = (*ACTIONS, *FALLBACKS)
"""Every verdict a screened send may get, as the metrics count them."""
OUTCOMES: Final = ("ok", "error", "timeout", "bad_answer")
"""How a call may end, as the metrics count them."""


class Screened:
    """What a screened send gets: the backend's verdict, or the failure
    policy's (``fallback`` says why: one of :data:`FALLBACKS`)."""

    __slots__ = ("action", "body", "extra", "fallback", "reason")

    def __init__(self, action: str, *, body: Any = None, extra: dict[str, Any] | None = None,
                 reason: str = "", fallback: str = "") -> None:
        self.action = action
        """One of :data:`ACTIONS`."""
        self.body = body
        """The body to store instead of the sender's (accept only; None: as sent)."""
        self.extra = extra
        """The object to store and deliver with the message (accept only)."""
        self.reason = reason
        """The backend's words (reject, hold), at most :data:`REASON_MAX` characters."""
        self.fallback = fallback
        """"" when the backend decided, else why the failure policy did."""

    def __repr__(self) -> str:
        return (f"Screened({self.action!r}, body={self.body!r}, extra={self.extra!r}, "
                f"reason={self.reason!r}, fallback={self.fallback!r})")


ACCEPTED: Final = Screened(ACCEPT)
"""The verdict of a plain accept (no body, extra or reason), shared by every
send that gets one (no object a message): never changed."""


def message_document(ask_id: str, room: str, message: NewMessage, address: str,
                     claims: Claims | None) -> dict[str, Any]:
    """A send as the backend reads it in a call's ``messages``."""
    return {"id": ask_id, "room": room, "uid": message.uid, "kind": held_kind(message),
            "to": message.to, "body": message.body, "client_msg_id": message.client_msg_id,
            "address": address, "claims": None if claims is None else claims_document(claims)}


def claims_document(claims: Claims) -> dict[str, Any]:
    """A ticket's claims as the backend reads them: ``sub``, ``rooms`` (None:
    every room), ``publish``, ``exp``."""
    exp = claims.exp
    return {"sub": claims.uid, "rooms": None if claims.rooms is None else sorted(claims.rooms),
            "publish": claims.publish, "exp": int(exp) if exp.is_integer() else exp}


def verdicts(doc: Any, ids: Collection[str], *, max_body: int,
             extra_bytes: int) -> tuple[dict[str, Screened], list[str]]:
    """The verdicts of a call's answer ``doc`` for the messages ``ids``,
    and what is wrong with it (empty: a valid verdict for each). A verdict
    for an id not asked about is ignored; one that is not valid (an unknown
    action, a body over ``max_body`` or no JSON value, an extra that is no
    object or over ``extra_bytes`` as JSON) is left out and said."""
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
        return {}, ["the answer is not an object with a results list"]
    found: dict[str, Screened] = {}
    problems: list[str] = []
    for result in doc["results"]:
        ask_id = result.get("id") if isinstance(result, dict) else None
        if not isinstance(ask_id, str) or ask_id not in ids:
            continue
        try:
            found[ask_id] = _verdict(result, max_body, extra_bytes)
        except ValueError as exc:
            problems.append(f"{ask_id}: {exc}")
    missing = len(ids) - len(found) - len(problems)
    if missing:
        problems.append(f"no verdict for {missing} of {len(ids)} messages")
    return found, problems


def _verdict(result: dict[str, Any], max_body: int, extra_bytes: int) -> Screened:
    action = result.get("action")
    if action not in ACTIONS:
        raise ValueError(f"action must be one of {', '.join(ACTIONS)}, not {action!r}")
    reason = result.get("reason")
    reason = reason[:REASON_MAX] if isinstance(reason, str) else ""
    if action != ACCEPT:
        return Screened(action, reason=reason)
    body, extra = result.get("body"), result.get("extra")
    if body is None and extra is None and not reason:
        return ACCEPTED
    try:
        if body is not None:
            check_value(body)
            if json_size(body) > max_body:
                raise ValueError(f"its body is over {max_body} bytes")
        if extra is not None:
            if not isinstance(extra, dict):
                raise ValueError("extra must be an object")
            check_value(extra)
            if json_size(extra) > extra_bytes:
                raise ValueError(f"its extra is over {extra_bytes} bytes")
    except BadBody as exc:
        raise ValueError(exc.message) from None
    return Screened(ACCEPT, body=body, extra=extra, reason=reason)


class _Ask:
    """One send waiting for its verdict."""

    __slots__ = ("deadline", "deliver", "doc", "done", "id")

    def __init__(self, ask_id: str, doc: dict[str, Any], deliver: Callable[[Screened], None],
                 deadline: float) -> None:
        self.id = ask_id
        self.doc = doc
        self.deliver = deliver
        """Called once with its verdict (by :meth:`SendHook._settle`), unless
        its sender stopped waiting first."""
        self.deadline = deadline
        """When it gets the failure policy (the loop's time)."""
        self.done = False
        """It got its verdict, or its sender stopped waiting."""


class SendHook:
    """A node's calls to the backend's send hook (see the module's docstring)."""

    def __init__(self, settings: Settings, clock: Clock, metrics: Metrics) -> None:
        if not settings.send_hook or not settings.hook_secret:
            raise ValueError("a send hook needs its URL and its secret")
        self.url = settings.send_hook
        self._secret = settings.hook_secret
        self.timeout = settings.send_hook_timeout
        self.failure = settings.send_hook_failure
        self.batch = settings.send_hook_batch
        self.calls_max = settings.send_hook_calls
        self._max_body = settings.max_message_bytes
        self._extra_bytes = settings.send_hook_extra_bytes
        self._clock = clock
        self.circuit = Circuit(clock, trip=settings.send_hook_trip,
                               cooldown=settings.send_hook_cooldown,
                               trial_timeout=2 * self.timeout)
        self._waiting: deque[_Ask] = deque()
        self._asked: deque[_Ask] = deque()
        """Every send not answered yet, in the order they came (so by
        deadline): one timer gives the late ones the failure policy, not
        one timer a send (an ``asyncio.timeout`` each cost a few µs)."""
        self._late_timer: asyncio.TimerHandle | None = None
        self._calls: set[asyncio.Task[None]] = set()
        self._carried: dict[asyncio.Task[None], list[_Ask]] = {}
        """The sends each call in flight carries."""
        self._flush_soon: asyncio.Handle | None = None
        self._session: Origin | None = None
        self._prefix = secrets.token_hex(4)
        self._count = 0
        self._throttled = Throttled(logger)
        self._metrics = metrics
        # Plain counts, added to the counters before each render (a
        # Prometheus increment takes a lock: one a message was a cost of its own).
        self._call_counts = metrics.tally([metrics.send_hook_calls.labels(o) for o in OUTCOMES])
        self._verdict_counts = metrics.tally(
            [metrics.send_hook_messages.labels(v) for v in VERDICTS])
        metrics.track(metrics.send_hook_circuit, lambda: float(self.circuit.is_open))

    @property
    def state(self) -> str:
        """The circuit's state: ``closed``, ``open`` or ``trial``."""
        return self.circuit.state

    @property
    def calls_in_flight(self) -> int:
        """Calls to the backend not answered yet."""
        return len(self._calls)

    @property
    def waiting(self) -> int:
        """Sends queued for the next call (those that gave up included until it leaves)."""
        return len(self._waiting)

    async def start(self) -> None:
        """Open the keep-alive pool (before the first send is screened)."""
        if self._session is None:
            self._session = Origin(self.url, connections=self.calls_max)

    async def stop(self) -> None:
        """Give every waiting send the failure policy, stop the calls in
        flight (theirs too), and close the pool."""
        if self._flush_soon is not None:
            self._flush_soon.cancel()
            self._flush_soon = None
        if self._late_timer is not None:
            self._late_timer.cancel()
            self._late_timer = None
        while self._waiting:
            self._fall_back(self._waiting.popleft(), STOPPED)
        self._asked.clear()  # each is waiting (above) or in a call (below)
        calls = list(self._calls)
        # Given here, not by the call: a task cancelled before its first step
        # never runs its body.
        carried = [ask for task in calls for ask in self._carried.get(task, ())]
        for task in calls:
            task.cancel()
        if calls:
            await asyncio.gather(*calls, return_exceptions=True)
        for ask in carried:
            self._fall_back(ask, STOPPED)
        session, self._session = self._session, None
        if session is not None:
            session.close()

    async def screen(self, room: str, message: NewMessage, address: str,
                     claims: Claims | None) -> Screened:
        """The verdict on ``message`` (to ``room``, from ``address``, under
        ``claims`` in ticket mode): the backend's, or the failure policy's
        within ``--send-hook-timeout``. Never raises for the backend's
        faults. Cancelled, its send is left out of the call it waits for
        (if that has not left yet)."""
        at_once = self._refused()
        if at_once is not None:
            return at_once
        future: asyncio.Future[Screened] = asyncio.get_running_loop().create_future()
        ask = self._queue(room, message, address, claims, partial(_resolve, future))
        try:
            return await future
        except asyncio.CancelledError:
            ask.done = True
            raise

    def ask(self, room: str, message: NewMessage, address: str, claims: Claims | None,
            deliver: Callable[[Screened], None]) -> Screened | None:
        """:meth:`screen` without a coroutine: the failure policy's verdict
        now when the circuit is open, else None and ``deliver`` is called
        once, from the loop, with the verdict (it must not raise)."""
        at_once = self._refused()
        if at_once is None:
            self._queue(room, message, address, claims, deliver)
        return at_once

    def _refused(self) -> Screened | None:
        """The failure policy's verdict when no call may be made now."""
        if not self.circuit.admits() or self._session is None:
            return self._fallback(CIRCUIT if self._session is not None else STOPPED)
        return None

    def _queue(self, room: str, message: NewMessage, address: str, claims: Claims | None,
               deliver: Callable[[Screened], None]) -> _Ask:
        """Queue a send for a call; its deadline watched."""
        loop = asyncio.get_running_loop()
        self._count += 1
        ask_id = f"{self._prefix}-{self._count}"
        deadline = loop.time() + self.timeout
        ask = _Ask(ask_id, message_document(ask_id, room, message, address, claims), deliver,
                   deadline)
        self._waiting.append(ask)
        asked = self._asked
        while asked and asked[0].done:  # answered: forgotten
            asked.popleft()
        asked.append(ask)
        if self._late_timer is None:
            self._late_timer = loop.call_at(deadline, self._late)
        if len(self._waiting) >= self.batch and len(self._calls) < self.calls_max:
            self._flush()
        elif not self._calls and self._flush_soon is None:
            self._flush_soon = loop.call_soon(self._flush)
        return ask

    def _late(self) -> None:
        """Give the sends past their deadline the failure policy; wait for
        the next one's."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        asked = self._asked
        while asked and (asked[0].done or asked[0].deadline <= now):
            ask = asked.popleft()
            if not ask.done:
                self._settle(ask, self._fallback(LATE))
        self._late_timer = loop.call_at(asked[0].deadline, self._late) if asked else None

    def _fallback(self, why: str) -> Screened:
        """The failure policy's verdict, ``why`` it decided, counted."""
        self._verdict_counts[VERDICTS.index(why)] += 1
        return Screened(self.failure, reason=FALLBACK_REASONS[why], fallback=why)

    def _fall_back(self, ask: _Ask, why: str) -> None:
        if not ask.done:
            self._settle(ask, self._fallback(why))

    @staticmethod
    def _settle(ask: _Ask, verdict: Screened) -> None:
        """Hand ``ask`` its verdict (once: it is done after). A sender's
        fault in taking it is logged, and the other sends still get theirs."""
        if not ask.done:
            ask.done = True
            try:
                ask.deliver(verdict)
            except Exception:
                logger.exception("send hook: a verdict could not be handed to its send")

    def _flush(self) -> None:
        """Send what waits, a batch a call, while fewer than
        ``--send-hook-calls`` are in flight (sends that gave up left out)."""
        self._flush_soon = None
        waiting = self._waiting
        while waiting and len(self._calls) < self.calls_max:
            batch: list[_Ask] = []
            while waiting and len(batch) < self.batch:
                ask = waiting.popleft()
                if not ask.done:
                    batch.append(ask)
            if not batch:
                return
            task = asyncio.create_task(self._call(batch), name="liveroom-send-hook-call")
            self._calls.add(task)
            self._carried[task] = batch
            task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        self._calls.discard(task)
        self._carried.pop(task, None)
        if self._waiting and self._session is not None:
            self._flush()

    async def _call(self, batch: list[_Ask]) -> None:
        """One call for ``batch``: each ask gets its verdict, or the failure
        policy's when the call or its verdict fails."""
        session = self._session
        assert session is not None
        body = orjson.dumps({"messages": [ask.doc for ask in batch]})
        headers = {"Content-Type": "application/json",
                   HEADER: sign(self._secret, body, int(self._clock.time()))}
        problem = ""
        found: dict[str, Screened] = {}
        try:
            # A verdict's body and extra are bounded by their compact JSON;
            # the backend's writer may escape more (Python's \u escapes of an
            # emoji, 12 bytes for 4; Go's of <, > and &, 6 for 1): room for
            # six times that, so a valid verdict never fails its call.
            status, raw = await session.post(body, headers, body_max=len(batch) * (
                6 * (self._max_body + self._extra_bytes) + 2048), within=self.timeout)
            if status != 200:
                outcome, problem = "error", f"it answered {status}"
            else:
                found, problems = verdicts(
                    _loads(raw), {ask.id: ask for ask in batch}, max_body=self._max_body,
                    extra_bytes=self._extra_bytes)
                outcome = "bad_answer" if problems else "ok"
                problem = "; ".join(problems[:3])
        except TimeoutError:
            outcome, problem = "timeout", f"no answer within {self.timeout:g} s"
        except (ValueError, OSError) as exc:
            outcome, problem = "error", f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # a fault of ours: its senders still get an answer
            logger.exception("send hook: a call to %s failed unexpectedly", self.url)
            outcome, problem = "error", f"{type(exc).__name__}: {exc}"
        self._call_counts[OUTCOMES.index(outcome)] += 1
        counts = self._verdict_counts
        for ask in batch:
            verdict = found.get(ask.id)
            if verdict is None:
                self._fall_back(ask, FAILED)
            elif not ask.done:
                counts[VERDICTS.index(verdict.action)] += 1
                self._settle(ask, verdict)
        if outcome == "ok":
            if self.circuit.passed():
                logger.warning("send hook: circuit closed: %s answers again after %.1f s; "
                               "sends are screened again", self.url,
                               self._clock.monotonic() - self.circuit.opened_at)
            return
        self._throttled.warning(f"send-hook-{outcome}", "send hook: a call to %s failed (%s): "
                                "%s", self.url, outcome, problem)
        if self.circuit.failed():
            self._metrics.send_hook_opened.inc()
            for ask in self._waiting:
                self._fall_back(ask, CIRCUIT)
            self._waiting.clear()
            logger.warning("send hook: circuit open after %d failed calls in a row (last: %s: "
                           "%s): sends get --send-hook-failure=%s without a call; one trial "
                           "call in %g s", self.circuit.trip, outcome, problem, self.failure,
                           self.circuit.cooldown)


def _resolve(future: asyncio.Future[Screened], verdict: Screened) -> None:
    if not future.done():  # cancelled: its sender stopped waiting
        future.set_result(verdict)


def _loads(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"its answer is not JSON: {exc}") from None
