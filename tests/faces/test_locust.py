"""The load test's own tools, run for real: a distributed locust run (a master
and two workers on 127.0.0.1) against a ``liveroom serve`` process, users
spread over several addresses (``LOADTEST_HOSTS``), and senders against a
server with the default rate limits."""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from support import ADMIN_HEADERS, PUBLISHER, free_port, serve

from liveroom.settings import Settings

LOCUSTFILE = Path(__file__).resolve().parents[2] / "loadtest" / "locustfile.py"
DEFAULT_LIMITS = ",".join(str(window) for window in Settings().rate_limits.per_uid)
"""A default server's per-uid windows (the tests' servers run without them)."""

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def locust(*args: str, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen([sys.executable, "-m", "locust", "-f", str(LOCUSTFILE),
                                 "--loglevel", "WARNING", *args],
                                env=env, stdout=out, stderr=subprocess.STDOUT)


def stats_rows(prefix: Path) -> dict[tuple[str, str], dict[str, str]]:
    with open(f"{prefix}_stats.csv") as f:
        return {(row["Type"], row["Name"]): row for row in csv.DictReader(f)}


def load_env(tmp_path: Path, room: str, **extra: str) -> dict[str, str]:
    return {**os.environ, "LOADTEST_ROOM": room, "LOADTEST_POLL_TIMEOUT": "5",
            "LOADTEST_SENDERS": "1", "LOADTEST_SEND_RATE": "4",
            "LIVEROOM_PUBLISHER_TOKEN": PUBLISHER, "LOADTEST_SEND_AS_PUBLISHER": "1",
            "LOADTEST_REPORT": str(tmp_path / "report.json"), **extra}


def test_a_master_and_two_workers_sum_their_listeners_figures(tmp_path: Path) -> None:
    with serve("--tiers", "off") as (url, _):
        port = free_port()
        env = load_env(tmp_path, "distributed")
        prefix = tmp_path / "run"
        master = locust("--master", "--master-bind-host", "127.0.0.1",
                        "--master-bind-port", str(port), "--expect-workers", "2",
                        "--headless", "-u", "21", "-r", "21", "-t", "8s", "--host", url,
                        "--csv", str(prefix), "--only-summary",
                        "ListenerUser", "SenderUser", env=env, log=tmp_path / "master.log")
        workers = [locust("--worker", "--master-host", "127.0.0.1", "--master-port",
                          str(port), env=env, log=tmp_path / f"worker{n}.log")
                   for n in range(2)]
        try:
            assert master.wait(90) == 0, (tmp_path / "master.log").read_text()
            for worker in workers:
                worker.wait(30)
        finally:
            for proc in (master, *workers):
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
    reports = [json.loads(path.read_text()) for path in tmp_path.glob("report.json.*")]
    assert len(reports) == 2, "each worker writes its own report"
    assert all(report["polls"] for report in reports), "both workers ran listeners"
    # What every worker's listeners received live (not first polls) is what
    # the master's DELIVER row counts: the figures are summed across workers.
    live = sum(poll[4] for report in reports for poll in report["polls"] if poll[3] >= 0)
    answers = sum(1 for report in reports for poll in report["polls"]
                  if poll[3] >= 0 and poll[4])
    rows = stats_rows(prefix)
    assert int(rows[("DELIVER", "normal")]["Request Count"]) == answers > 0
    master_log = (tmp_path / "master.log").read_text()
    assert f"delivered {live} in {answers} answers" in master_log
    delivered = live
    sent = int(rows[("POST", "/messages")]["Request Count"])
    assert int(rows[("POST", "/messages")]["Failure Count"]) == 0
    listeners = sum(len({poll[0] for poll in report["polls"]}) for report in reports)
    assert listeners == 20
    # Every listener gets every message sent while it listens: about
    # listeners x sends, less what was sent before they all joined.
    assert delivered >= 0.6 * listeners * sent
    assert ("GAP", "normal") not in rows


def test_listeners_spread_over_several_addresses(tmp_path: Path) -> None:
    with serve("--tiers", "off") as (first, _), serve("--tiers", "off") as (second, _):
        for url in (first, second):  # a room counts its listeners once it is live
            start = urllib.request.Request(f"{url}/v1/admin/rooms/spread/start", method="POST",
                                           headers=ADMIN_HEADERS)
            urllib.request.urlopen(start).close()
        env = load_env(tmp_path, "spread", LOADTEST_HOSTS=f"{first},{second}",
                       LOADTEST_SENDER_WEIGHT="0", LOADTEST_SENDERS="0")
        proc = locust("--headless", "-u", "6", "-r", "6", "-t", "3s", "--csv",
                      str(tmp_path / "spread"), "--only-summary", "ListenerUser",
                      env=env, log=tmp_path / "spread.log")
        assert proc.wait(60) == 0, (tmp_path / "spread.log").read_text()
        # No --host: each server counts the listeners that polled it (within
        # a few seconds: a heartbeat flush, a shard write and a merge).
        assert [online_within(url, "spread", 3) for url in (first, second)] == [3, 3]


def online_within(url: str, room: str, want: int, seconds: float = 15.0) -> int:
    """The room's online count once it reaches ``want`` (or the last one seen)."""
    deadline = time.monotonic() + seconds
    while True:
        with urllib.request.urlopen(f"{url}/v1/rooms/{room}/stats") as answer:
            online = int(json.load(answer)["online"])
        if online >= want or time.monotonic() > deadline:
            return online
        time.sleep(0.2)


SENT = re.compile(r"^  sent normal +(\d+) stored \(201\), (\d+) refused by a rate limit "
                  r"\(429\), (\d+) failed$", re.M)


def senders_against_default_limits(tmp_path: Path, **extra: str) -> tuple[int, str, int]:
    """One sender at 10 a second for 6 s, no listener, against a server with
    the default per-uid limits (5 a second, 30 a minute, 300 an hour):
    locust's exit status, its output (its table and summary, final; the CSV
    may lag them), and the room's head once it quit."""
    with serve("--tiers", "off", "--rate-limits", DEFAULT_LIMITS) as (url, _):
        env = load_env(tmp_path, "limits", LOADTEST_SEND_RATE="10",
                       LOADTEST_SEND_AS_PUBLISHER="", **extra)
        proc = locust("--headless", "-u", "1", "-r", "1", "-t", "6s", "--host", url,
                      "--only-summary", "SenderUser", env=env, log=tmp_path / "limits.log")
        status = proc.wait(60)
        with urllib.request.urlopen(f"{url}/v1/rooms/limits/poll?uid=reader&recent=0") as got:
            head = int(json.load(got)["seq"])
    return status, (tmp_path / "limits.log").read_text(), head


def row(log: str, name: str) -> tuple[int, int] | None:
    """Requests and failures of the row ``POST name`` of locust's table."""
    found = re.search(rf"^POST +{re.escape(name)} +(\d+) +(\d+)\(", log, re.M)
    return (int(found.group(1)), int(found.group(2))) if found else None


def test_the_default_load_is_within_a_default_servers_rate_limits(tmp_path: Path) -> None:
    """A sender speaks as chatters in turn, each at a person's pace (one
    message every LOADTEST_CHAT_INTERVAL, 20 s): at 10 sends a second, 200
    uids, none near its limits; every send stored, locust exits 0. (Before
    issue 46 a sender was one uid: at the documented 1 a second, half the
    sends of a 60 s run were 429s counted as failures, and locust exited 1.)"""
    status, log, head = senders_against_default_limits(tmp_path)
    assert status == 0, log
    sent = SENT.search(log)
    assert sent, log
    stored, refused, failed = map(int, sent.groups())
    assert (refused, failed) == (0, 0), log
    # One may be stopped in flight. Ten or more: one uid would have passed 5 a second.
    assert 10 <= stored <= head <= stored + 1, log
    assert row(log, "/messages") == (stored, 0)
    assert row(log, "/messages [429]") is None


def test_a_rate_limits_429_is_an_answer_counted_apart(tmp_path: Path) -> None:
    """One uid at 10 sends a second (LOADTEST_CHAT_INTERVAL=0) passes its
    limit of 5 a second: the 429s are the server's answers, in a row of their
    own and in the summary, not failures; locust exits 0, and the sends it
    counts as stored are the room's."""
    status, log, head = senders_against_default_limits(tmp_path, LOADTEST_CHAT_INTERVAL="0")
    assert status == 0, log
    sent = SENT.search(log)
    assert sent, log
    stored, refused, failed = map(int, sent.groups())
    assert refused > 0, log
    assert failed == 0, log
    assert stored <= head <= stored + 1, log  # one may be stopped in flight
    assert row(log, "/messages") == (stored, 0)
    assert row(log, "/messages [429]") == (refused, 0)
