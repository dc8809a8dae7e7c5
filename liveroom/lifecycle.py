"""Background work: one task per job, started and stopped by its owner, and
outages of what it depends on logged once.

- :class:`Periodic` runs a step every ``every`` seconds on the injected clock,
  as one task; a step that raises is logged and the next one runs anyway.
- :func:`stop_task` cancels a task and waits until it is gone.
- :func:`answer_waiters` gives the future a job's waiters share its result.
- :class:`Outage` logs a dependency (the store) going down once, and coming
  back once: a store that stays down must not flood the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from .clock import Clock

T = TypeVar("T")


async def stop_task(task: asyncio.Task[None] | None) -> None:
    """Cancel ``task`` (if any) and wait until it ended; what it raised on the
    way out is its own business (it logged it)."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def answer_waiters(shared: asyncio.Future[T] | None, result: T | None,
                   error: BaseException | None = None) -> None:
    """Give ``shared`` (the future every waiter of one background job awaits)
    ``error``, or else ``result``; nothing when it has no waiter future or was
    answered already. An error is marked retrieved: its waiters may all
    have gone away, and asyncio would log it as never retrieved."""
    if shared is None or shared.done():
        return
    if error is not None:
        shared.set_exception(error)
        shared.exception()
    else:
        assert result is not None
        shared.set_result(result)


class Outage:
    """One dependency's state as the log tells it: a warning when it starts
    failing, an info line when it works again, nothing in between."""

    def __init__(self, logger: logging.Logger) -> None:
        self._logger = logger
        self.down = False

    def failed(self, message: str, *args: object) -> None:
        """It failed (again): ``message % args`` logged only when it was up."""
        if not self.down:
            self.down = True
            self._logger.warning(message, *args)

    def worked(self, message: str, *args: object) -> None:
        """It worked: ``message % args`` logged only when it was down."""
        if self.down:
            self.down = False
            self._logger.info(message, *args)


class Periodic:
    """``step`` every ``every`` seconds (first after one period), as one task.

    A step that raises is logged with its traceback and the next one runs as
    planned. ``stop`` cancels the task and also raises a flag the loop checks:
    redis-py may finish a command in flight despite a cancel and let the step
    return, and the loop must not go on then.

    With ``finish_step``, ``stop`` cancels only the wait between steps: a
    step under way runs to its end first. For a step whose effect in the
    store a cancel cannot undo and whose caller would then do again (likes
    handed to Redis, put back when the call was cancelled after Redis ran it).
    """

    def __init__(self, name: str, every: float, step: Callable[[], Awaitable[object]],
                 clock: Clock, logger: logging.Logger, *, finish_step: bool = False) -> None:
        self.name = name
        self.every = every
        self._step = step
        self._clock = clock
        self._logger = logger
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._finish_step = finish_step
        self._stepping = False

    @property
    def running(self) -> bool:
        return self._task is not None

    def start(self) -> None:
        if self._task is None:
            self._stopping = False
            self._task = asyncio.create_task(self._run(), name=self.name)

    async def stop(self) -> None:
        task, self._task = self._task, None
        self._stopping = True
        if task is not None and self._finish_step and self._stepping:
            # The loop ends after this step: wait for it, do not cancel it.
            await asyncio.shield(task)
            return
        await stop_task(task)

    async def _run(self) -> None:
        while not self._stopping:
            await self._clock.sleep(self.every)
            self._stepping = True
            try:
                await self._step()
            except Exception:  # one bad step must not end the job
                self._logger.exception("%s failed; trying again in %g s", self.name,
                                       self.every)
            finally:
                self._stepping = False
