"""Throttled log lines: a flood of one kind of line becomes one line per period."""

from __future__ import annotations

import logging

import pytest

from liveroom.lograte import ServerLog, Throttled


class Ticks:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_flood_of_one_kind_is_one_line_per_period_with_a_count(
        caplog: pytest.LogCaptureFixture) -> None:
    ticks = Ticks()
    throttled = Throttled(logging.getLogger("t"), every=10, clock=ticks)
    logged = [throttled.warning("bad", "bad request %d", i) for i in range(100)]
    assert logged == [True] + [False] * 99
    assert throttled.warning("other", "another kind")  # kinds are counted apart
    ticks.now = 10.0
    assert throttled.warning("bad", "bad request %d", 100)
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["bad request 0", "another kind",
                     "bad request 100 (and 99 more like it in the last 10 s)"]


def test_aiohttp_exceptions_become_one_line_without_traceback(
        caplog: pytest.LogCaptureFixture) -> None:
    server_log = ServerLog(logging.getLogger("aiohttp.server"))
    try:
        raise ValueError("line one\nline two")
    except ValueError as exc:
        server_log.exception("Error handling request from %s", "1.2.3.4", exc_info=exc)
    (record,) = caplog.records
    assert record.exc_info is None
    assert record.levelname == "WARNING"
    assert record.getMessage() == ("Error handling request from 1.2.3.4: ValueError: "
                                   "line one line two")
