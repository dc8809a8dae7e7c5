"""Delivering the rooms' events to the backend (``--webhook URL``): the
node's background task that reads the store's outbox
(:class:`~liveroom.store.outbox.Outbox`) and POSTs each event, signed.

**One node at a time.** Every node with ``--webhook`` runs this task; the
one holding the outbox's lease delivers, renewing the lease every turn
(about five times a second, and at least every third of
``--webhook-lease``); the others ask for it every third of
``--webhook-lease``. When the holder dies its lease runs out and the next
node to ask takes it and, first, every event the dead one had read and not
finished (``Outbox.take_over``): nothing read is lost, some may be
delivered twice (those the dead node had POSTed and not yet marked done).
A read of the outbox that fails may have lost its reply after the store
gave events to the holder: the holder's next turn takes over its own
events the same way before it reads again.

**The sweep.** The delivering node also moves, every
:data:`~liveroom.events.SWEEP_EVERY` seconds (and when it takes the lease),
the events left in their rooms by an action whose node died or whose move
failed (:meth:`Events.sweep <liveroom.events.Events.sweep>`).

**A delivery** is ``POST URL`` of the event's JSON with ``Content-Type:
application/json`` and ``Liveroom-Signature: t=<unix>,v1=<hex>``
(:mod:`liveroom.signature`, keyed with ``--webhook-secret``; a new ``t``
each attempt), over the node's keep-alive connections to the backend
(:class:`~liveroom.origin.Origin`, as the send hook's calls). Any 2xx answer is
delivery; anything else (another status, a redirect, no answer within
``--webhook-timeout``) is retried after a backoff of 0.5 s doubling up to 5
minutes, each drawn between half and all of it (jitter, so that a
recovering backend is not hit by every event at once). An event still not
delivered ``--webhook-retry-for`` after its action (or after this node took
it, when later: a replay, a takeover) is given up: kept in the
store's failed list (``GET /v1/admin/webhooks/failed``, ``liveroom
webhooks failed``), from where a replay sends it again, under its own id.

**Order.** The events of one room are delivered one at a time, in the
order they were written (a room's next waits for its previous to be
delivered or given up); rooms go in parallel, :data:`CALLS` POSTs at most.
A takeover, a replay or a retry by two nodes may break it: a receiver that
cares orders by ``at_ms`` and dedupes by ``id``.

**Limits.** The holder keeps at most :data:`HELD_MAX` events in memory;
the rest wait in the outbox. The lease is timed by the store (its expiry),
not by the nodes' clocks; ``at_ms`` and the retry window are the
deliverer's wall clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import secrets
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Final

import orjson

from . import __version__
from .clock import Clock
from .errors import StoreUnavailable
from .events import SWEEP_EVERY
from .lifecycle import Outage, stop_task
from .metrics import Metrics
from .origin import Origin
from .settings import Settings
from .signature import HEADER, sign
from .store.outbox import Outbox, Outgoing

logger: Final = logging.getLogger("liveroom.webhooks")

CALLS: Final = 8
"""POSTs in flight at once (and keep-alive connections kept to the backend)."""
HELD_MAX: Final = 1_000
"""Events the delivering node reads from the outbox ahead of delivering them."""
TURN: Final = 0.2
"""Seconds between two reads of the outbox by the delivering node (an event
written through this node is read at once)."""
BACKOFF_FIRST: Final = 0.5
BACKOFF_MAX: Final = 300.0


def backoff(attempts: int, draw: float) -> float:
    """Seconds to wait after the ``attempts``-th failed attempt (1, 2, ...):
    :data:`BACKOFF_FIRST` doubling up to :data:`BACKOFF_MAX`, times
    ``0.5 + draw / 2`` (``draw`` in [0, 1]: the jitter)."""
    full = min(BACKOFF_MAX, BACKOFF_FIRST * 2.0 ** min(attempts - 1, 30))
    return full * (0.5 + draw / 2)


@dataclass
class _Pending:
    """An event the node holds: its room's turn, its attempts."""

    event: Outgoing
    room: str
    at_ms: int
    attempts: int = 0
    next_at: float = 0.0
    """When the next attempt may go (the clock's ``time()``)."""
    busy: bool = False
    delivered: bool = False
    """Delivered, not yet marked done in the store (the store failed that)."""
    read_ms: int = 0
    """When this node took it (its retries run --webhook-retry-for from its
    action, or from then when later: a replayed event, one taken over)."""


def _room_and_time(data: bytes) -> tuple[str, int]:
    try:
        doc = orjson.loads(data)
        return str(doc.get("room", "")), int(doc.get("at_ms", 0))
    except (orjson.JSONDecodeError, AttributeError, TypeError, ValueError):
        return "", 0


class Webhooks:
    """One node's part in delivering the outbox (see the module docstring).

    :meth:`start` opens the backend's connections and starts the task,
    :meth:`stop` cancels it, gives the lease up (so another node takes over
    at once, not a lease later) and closes the connections. :meth:`wake` makes the
    delivering node read the outbox now (an event was just written).
    """

    def __init__(self, settings: Settings, outbox: Outbox, clock: Clock, *,
                 metrics: Metrics | None = None, holder: str = "",
                 sweep: Callable[[], Awaitable[int]] | None = None) -> None:
        if not settings.webhook or not settings.webhook_secret:
            raise ValueError("webhooks need their URL and their secret")
        self.url = settings.webhook
        self._secret = settings.webhook_secret
        self._retry_ms = int(settings.webhook_retry_for * 1000)
        self._timeout = settings.webhook_timeout
        self._lease_ms = max(1, int(settings.webhook_lease * 1000))
        self._outbox = outbox
        self._clock = clock
        self._metrics = metrics
        self.holder = holder or f"{settings.name}/{os.getpid()}/{secrets.token_hex(4)}"
        """This process's name as the lease and the consumer group know it:
        unique (the workers of one ``liveroom serve --workers N`` share a
        node name), so a restarted node is a new consumer, which takes over
        its former self's events as any other's."""
        self.holding = False
        """This node holds the lease (it delivers)."""
        self._renewed_at = float("-inf")
        self._sweep = sweep
        self._swept_at = float("-inf")
        self._unsure = False
        """A read of the outbox failed: its reply may have been lost after the
        store gave events to this holder, which it would then never read
        again (a read asks for events never read). The next turn claims
        back every event the store holds for it."""
        self._pending: dict[str, _Pending] = {}
        self._rooms: dict[str, deque[str]] = {}
        self._calls: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._origin: Origin | None = None
        self._outage = Outage(logger)
        if metrics is not None:
            metrics.webhook_lag.track(self.lag)
            metrics.webhook_holding.track(lambda: len(self._pending))
            metrics.webhook_lease.track(lambda: 1.0 if self.holding else 0.0)

    # -- what is said of it -------------------------------------------------------

    def lag(self) -> float:
        """Seconds the oldest event held has waited since its action."""
        if not self._pending:
            return 0.0
        oldest = min(p.at_ms for p in self._pending.values())
        return max(0.0, self._clock.time() - oldest / 1000)

    @property
    def state(self) -> dict[str, object]:
        """For ``/healthz``: whether this node delivers, what it holds, its lag."""
        return {"delivering": self.holding, "held": len(self._pending),
                "lag_s": round(self.lag(), 3)}

    def wake(self) -> None:
        if self.holding:  # the others have nothing to read
            self._wake.set()

    # -- lifecycle ------------------------------------------------------------------

    async def start(self) -> None:
        if self._task is not None:
            return
        self._stopping = False
        self._origin = Origin(self.url, connections=CALLS,
                              user_agent=f"liveroom/{__version__} (webhooks)")
        self._task = asyncio.create_task(self._run(), name="webhooks")

    async def stop(self) -> None:
        task, self._task = self._task, None
        self._stopping = True
        await stop_task(task)
        for call in list(self._calls):
            await stop_task(call)
        if self.holding:
            self.holding = False
            with contextlib.suppress(StoreUnavailable):
                await self._outbox.release(self.holder)
        self._forget_all()
        if self._origin is not None:
            self._origin.close()
            self._origin = None

    # -- the loop -------------------------------------------------------------------

    async def _run(self) -> None:
        while not self._stopping:
            try:
                await self._turn()
                self._outage.worked("webhooks: the outbox answers again")
            except StoreUnavailable as exc:
                self._outage.failed("webhooks: cannot reach the outbox: %s", exc.message)
            except Exception:  # one bad turn must not end deliveries
                logger.exception("webhooks: a turn failed")
            wait = min(TURN, self._next_due()) if self.holding else self._lease_ms / 3000
            self._wake.clear()
            # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a
            # cancel that comes as the event is set, and the task would run on.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._wake.wait()

    def _next_due(self) -> float:
        """Seconds until a room's head may go again. Only heads count: the
        events behind one wait for it, whatever their own ``next_at`` (taken
        as due, they made the loop read the outbox without pause for as long
        as a head waited out its backoff)."""
        now = self._clock.time()
        waits = [head.next_at - now for head in self._heads() if not head.busy]
        return max(0.0, min(waits, default=TURN))

    def _heads(self) -> Iterator[_Pending]:
        """Each room's first event held (the one its turn is)."""
        for entries in self._rooms.values():
            head = self._pending.get(entries[0]) if entries else None
            if head is not None:
                yield head

    async def _turn(self) -> None:
        now = self._clock.monotonic()
        if self.holding and now - self._renewed_at < TURN:
            held = True  # renewed a moment ago: a turn an event woke only reads
        else:
            try:
                held = await self._outbox.lease(self.holder, self._lease_ms)
            except StoreUnavailable:
                held = False
                if self.holding:
                    raise
            if held:
                self._renewed_at = now
        if held and not self.holding:
            self._forget_all()
            # Holding only once the takeover worked: one the store failed is
            # tried again next turn (set before, it never was, and what the
            # node before had read stayed its own).
            taken = await self._outbox.take_over(self.holder, HELD_MAX)
            self.holding = True
            self._swept_at = float("-inf")
            logger.info("webhooks: this node delivers now (took over %d events)", len(taken))
            self._hold(taken)
        elif not held and self.holding:
            self.holding = False
            logger.warning("webhooks: the delivery lease went to another node")
            self._forget_all()
        if not self.holding:
            return
        if self._sweep is not None and now - self._swept_at >= SWEEP_EVERY:
            self._swept_at = now
            swept = await self._sweep()
            if swept:
                logger.info("webhooks: moved the events left in %d rooms", swept)
        if self._unsure:
            # Its own events (those held come back too, and count once).
            self._hold(await self._outbox.take_over(self.holder, HELD_MAX))
            self._unsure = False
        room_left = HELD_MAX - len(self._pending)
        if room_left > 0:
            try:
                read = await self._outbox.next(self.holder, room_left)
            except StoreUnavailable:
                self._unsure = True
                raise
            self._hold(read)
        self._deliver_due()

    def _hold(self, events: list[Outgoing]) -> None:
        for event in events:
            if event.entry in self._pending:
                continue
            room, at_ms = _room_and_time(event.data)
            self._pending[event.entry] = _Pending(event, room, at_ms,
                                                  read_ms=int(self._clock.time() * 1000))
            self._rooms.setdefault(room, deque()).append(event.entry)

    def _forget_all(self) -> None:
        self._pending.clear()
        self._rooms.clear()

    def _deliver_due(self) -> None:
        if not self.holding or self._stopping:
            return
        now = self._clock.time()
        for head in self._heads():
            if len(self._calls) >= CALLS:
                return
            if head.busy or head.next_at > now:
                continue
            head.busy = True
            call = asyncio.create_task(self._attempt(head), name="webhook-post")
            self._calls.add(call)
            call.add_done_callback(self._calls.discard)

    def _finished(self, pending: _Pending) -> None:
        self._pending.pop(pending.event.entry, None)
        entries = self._rooms.get(pending.room)
        if entries is not None:
            with contextlib.suppress(ValueError):
                entries.remove(pending.event.entry)
            if not entries:
                del self._rooms[pending.room]
        # The room's next goes now, not a turn later (a turn also renews the
        # lease and reads the outbox: three round trips an event otherwise).
        self._deliver_due()

    async def _attempt(self, pending: _Pending) -> None:
        try:
            if not pending.delivered:
                why = await self._post(pending.event.data)
                if why is not None:
                    await self._failed_attempt(pending, why)
                    return
                pending.delivered = True
                if self._metrics is not None:
                    self._metrics.webhook_delivered.inc()
            await self._outbox.done([pending.event.entry])
            self._finished(pending)
        except StoreUnavailable as exc:
            self._outage.failed("webhooks: cannot reach the outbox: %s", exc.message)
            # Delivered, its "done" is tried again soon; not delivered (its
            # give-up failed), the next POST waits its backoff, not a second.
            pending.next_at = self._clock.time() + (
                TURN * 5 if pending.delivered
                else max(TURN * 5, backoff(pending.attempts, random.random())))
        finally:
            pending.busy = False

    async def _failed_attempt(self, pending: _Pending, why: str) -> None:
        pending.attempts += 1
        if self._metrics is not None:
            self._metrics.webhook_attempts.labels(
                "status" if why.isdigit() else why).inc()
        now = self._clock.time()
        # From its action, or from when this node took it if later: a replay
        # (its action long past) is retried anew, not given up at once.
        deadline = (max(pending.at_ms, pending.read_ms) + self._retry_ms) / 1000
        if now >= deadline:
            await self._outbox.give_up(pending.event, why, int(now * 1000))
            if self._metrics is not None:
                self._metrics.webhook_failed.inc()
            logger.warning("webhooks: event %s given up after %d attempts (last: %s)",
                           pending.event.event_id, pending.attempts, why)
            self._finished(pending)
            return
        pending.next_at = min(deadline, now + backoff(pending.attempts, random.random()))
        if pending.attempts == 1:
            logger.info("webhooks: event %s not delivered (%s); retrying",
                        pending.event.event_id, why)

    async def _post(self, body: bytes) -> str | None:
        """POST one event: ``None`` when delivered (2xx), else why not (the
        status, ``"timeout"`` or ``"error"``)."""
        origin = self._origin
        if origin is None:
            return "error"
        headers = {"Content-Type": "application/json",
                   HEADER: sign(self._secret, body, int(self._clock.time()))}
        try:
            async with asyncio.timeout(self._timeout):
                status, _ = await origin.post(body, headers, body_max=None)
        except TimeoutError:
            return "timeout"
        except OSError:  # no connection, or no whole HTTP/1.1 answer on it
            return "error"
        # A redirect is not followed: not a delivery, as any other status.
        return None if 200 <= status < 300 else str(status)
