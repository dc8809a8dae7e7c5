"""The listening loop: :class:`Listening`, an async iterator of answers,
and the :class:`Backoff` between retries."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable, Coroutine
from types import TracebackType
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from .answers import Answer, Cursor, Retry, TopGivers
from .errors import ApiError, Unreachable

if TYPE_CHECKING:
    from .api import Client

READ_MARGIN = 10.0
"""Seconds a poll's read may take beyond its ``timeout`` and ``interval_ms``
before the client gives up on it and polls again."""
BACKOFF_FIRST = 0.5
"""Seconds before the first retry after a network error."""
BACKOFF_MAX = 30.0
"""Longest wait between two retries after network errors (a ``Retry-After``
is honoured as the server gives it: never sooner)."""


async def wait_or_until(delay: float, event: asyncio.Event) -> None:
    """Wait ``delay`` seconds, or less when ``event`` is set meanwhile (a
    retry's wait that a stop or a close cuts short)."""
    setting = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait((setting,), timeout=delay)
    finally:
        setting.cancel()


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
    poll in flight is abandoned); ``async with`` stops it on exit, and so
    does closing its client (leaving ``async with Client(...)``). Stopped,
    its ``async for`` ends without an error (``anext`` raises
    :class:`StopAsyncIteration`). Cancelling the task iterating it ends it
    too, whenever the cancellation comes.
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
        self.spread: int | None = None
        """A vip room's routing hint from the last answer, echoed by the next poll."""
        self.ranking: TopGivers | None = None
        """The room's top givers from the last answer that carried them (None
        before one); the polls echo its version."""
        self.slow = 0
        self.likes = 0
        """The room's likes total in the last answer (an answer that changes
        it is yielded, as one that changes slow mode is)."""
        """The room's slow mode in seconds, from the last answer (0: off)."""
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
            self.cursor = Cursor(answer.epoch, answer.seq, answer.iseq, answer.ctx,
                                 answer.pseq)
            self.interval_ms = answer.interval_ms
            self.spread = answer.spread
            if answer.ranking is not None:
                self.ranking = answer.ranking
            slowed = answer.slow != self.slow
            self.slow = answer.slow
            # A new likes total is news too (a quiet room's held poll is
            # answered with it): yielded like slow mode.
            liked = answer.likes != self.likes
            self.likes = answer.likes
            if first or self.empty or slowed or liked or not answer.empty:
                return answer
        raise StopAsyncIteration

    async def _until_stopped(self, call: Coroutine[Any, Any, Answer]) -> Answer:
        """``await call``, unless :meth:`stop` comes first (then :class:`_Stopped`,
        whatever the poll brought: the cursor stays where it was).

        A cancellation of the task awaiting this goes through whenever it
        comes. Its helper tasks are waited for with :func:`asyncio.wait`, which
        raises nothing of theirs; awaiting them with their ``CancelledError``
        suppressed also swallowed the task's own cancellation when it came in
        the loop iterations after an answer arrived, and the loop polled on
        (issue 46: ``asyncio.run`` cancels each task once, and never returned).
        """
        poll: asyncio.Task[Answer] = asyncio.ensure_future(call)
        poll.add_done_callback(_retrieved)
        stopped = asyncio.ensure_future(self._stopped.wait())
        try:
            await asyncio.wait((poll, stopped), return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
            if not poll.done():
                poll.cancel()
                # Let the cancelled poll close its connection before going on.
                await asyncio.wait((poll,))
        if self._stopped.is_set() or poll.cancelled():
            raise _Stopped
        return poll.result()

    async def _wait(self, retry: Retry) -> None:
        """Wait ``retry.delay`` seconds, or until stopped (a cancellation of
        the waiting task goes through, as in :meth:`_until_stopped`)."""
        if self.on_retry is not None:
            self.on_retry(retry)
        await wait_or_until(retry.delay, self._stopped)

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
            if cursor.pseq is not None:
                params["pseq"] = str(cursor.pseq)
            if self.recent is not None:  # what a reset brings
                params["recent"] = str(self.recent)
        if self.spread is not None:  # a vip room's routing hint, echoed
            params["spread"] = str(self.spread)
        if self.ranking is not None:  # only a changed ranking comes again
            params["ranking"] = str(self.ranking.version)
        client = self.client
        read_for = self.timeout + self.interval_ms / 1000 + READ_MARGIN
        doc = await client._call("GET", f"/v1/rooms/{quote(self.room, safe='')}/poll",
                                 params=params, headers=client._bearer(client.ticket),
                                 read_for=read_for)
        return Answer.from_doc(doc)


def _retrieved(poll: asyncio.Future[Answer]) -> None:
    """Take a finished poll's error, so that one nobody reads (the listening
    stopped, or its task was cancelled, as it failed) is not logged as never
    retrieved; :meth:`Listening._until_stopped` still raises it."""
    if not poll.cancelled():
        poll.exception()


class _Stopped(Exception):
    """The listening was stopped while a poll was in flight."""
