"""The background jobs' lifecycle: periodic steps and outages logged once."""

from __future__ import annotations

import asyncio
import logging

import pytest

from liveroom.clock import FakeClock
from liveroom.lifecycle import Outage, Periodic, stop_task

logger = logging.getLogger("test.lifecycle")


async def test_a_periodic_job_steps_every_period_and_survives_a_failing_step(
        fake_clock: FakeClock, caplog: pytest.LogCaptureFixture) -> None:
    steps: list[float] = []

    async def step() -> None:
        steps.append(fake_clock.monotonic())
        if len(steps) == 2:
            raise RuntimeError("one bad step")

    job = Periodic("job", 5.0, step, fake_clock, logger)
    job.start()
    job.start()  # a second start does not start a second task
    while not fake_clock.sleepers():  # the job reached its first sleep
        await asyncio.sleep(0)
    assert fake_clock.sleepers() == 1
    start = fake_clock.monotonic()
    for _ in range(3):
        await fake_clock.advance(5.0)
    assert [t - start for t in steps] == [5.0, 10.0, 15.0]
    assert "job failed; trying again in 5 s" in caplog.text
    await job.stop()
    assert not job.running
    await fake_clock.advance(20.0)
    assert len(steps) == 3


async def test_stop_task_waits_until_the_task_is_gone() -> None:
    ended = asyncio.Event()

    async def forever() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            ended.set()

    task = asyncio.create_task(forever())
    await asyncio.sleep(0)
    await stop_task(task)
    assert task.cancelled()
    assert ended.is_set()
    await stop_task(None)


def test_an_outage_is_logged_once_when_it_starts_and_once_when_it_ends(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="test.lifecycle")
    outage = Outage(logger)
    outage.worked("back")  # never down: nothing to say
    for _ in range(3):
        outage.failed("down: %s", "refused")
    outage.worked("back")
    outage.worked("back")
    assert [r.getMessage() for r in caplog.records] == ["down: refused", "back"]
    assert not outage.down
