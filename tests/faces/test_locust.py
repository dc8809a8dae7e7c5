"""The load test's own tools, run for real: a distributed locust run (a master
and two workers on 127.0.0.1) against a ``liveroom serve`` process, and users
spread over several addresses (``LOADTEST_HOSTS``)."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from support import ADMIN_HEADERS, PUBLISHER, free_port, serve

LOCUSTFILE = Path(__file__).resolve().parents[2] / "loadtest" / "locustfile.py"

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
