"""The cost table's rows, enforced on aiohttp's routes (the front enforces
the same rows on its own three: :mod:`proxy.role` gives its handlers theirs).

For each request it finds the route's row in :data:`~proxy.route_costs.COSTS`
(a dict lookup) and applies what the row declares:

- a route whose row says :data:`~proxy.route_costs.EXISTS` is refused (404
  ``no_such_room``) unless its room exists, before its handler runs
  (:class:`~proxy.room_gate.RoomGate`);
- a route that :attr:`~proxy.route_costs.RouteCost.finishes` runs to its end
  once it started, whatever the client does (aiohttp cancels a handler whose
  client went away): its work goes on in a task this object owns, and only
  the answer is dropped. A recall, a gift or an operator's change is never
  left half done by a reset;
- a route without a row is a fault of the node (500, logged): every route
  has its row, and ``tests/hostile/test_route_costs.py`` holds the table to
  the router.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Final

from aiohttp import web

from liveroom.errors import LiveroomError

from ..room_gate import RoomGate
from ..route_costs import COSTS, EXISTS, RouteCost

logger: Final = logging.getLogger("liveroom.proxy.bounds")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class RouteBounds:
    """The rows of aiohttp's routes, and the writes finishing whose client left."""

    def __init__(self, gate: RoomGate, costs: Iterable[RouteCost] = COSTS) -> None:
        self._gate = gate
        self._rows = {row.route: row for row in costs}
        self.finishing: set[asyncio.Task[web.StreamResponse]] = set()
        """Writes running on; each leaves the set when done."""

        @web.middleware
        async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
            return await self._enforce(request, handler)

        self.middleware = middleware
        """The middleware to give the application (after the errors')."""

    def row(self, request: web.Request) -> RouteCost | None:
        """The request's row; None for a request no route takes (aiohttp's
        404 or 405 follows)."""
        resource = request.match_info.route.resource
        if resource is None or request.match_info.http_exception is not None:
            return None
        method = "GET" if request.method == "HEAD" else request.method
        row = self._rows.get(f"{method} {resource.canonical}")
        if row is None:
            raise LiveroomError(f"the route {method} {resource.canonical} has no row in the "
                                "cost table (proxy/route_costs.py)")
        return row

    async def _enforce(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        row = self.row(request)
        if row is None:
            return await handler(request)
        if row.room == EXISTS:
            await self._gate.require(request.match_info["room"])
        if not row.finishes:
            return await handler(request)
        task = asyncio.ensure_future(handler(request))
        self.finishing.add(task)
        task.add_done_callback(self._finished)
        try:
            return await asyncio.shield(task)
        finally:
            # An error raised here keeps this frame in its traceback, and the
            # task keeps the error: without this, a cycle that only the
            # collector frees (a request's objects with it, a few KiB each).
            del task

    def _finished(self, task: asyncio.Task[web.StreamResponse]) -> None:
        self.finishing.discard(task)
        exc = None if task.cancelled() else task.exception()
        # Its caller may have gone (the client left): the errors middleware
        # shaped the expected ones for a caller still there.
        if exc is not None and not isinstance(exc, (LiveroomError, web.HTTPException)):
            logger.error("a write whose client left failed", exc_info=exc)

    async def drain(self, grace: float) -> None:
        """Let the writes whose client left end (at most ``grace`` seconds)."""
        if self.finishing:
            await asyncio.wait(set(self.finishing), timeout=grace)
