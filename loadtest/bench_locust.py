"""How many listeners one locust process can simulate, and what each costs it.

For each room kind asked (``--kind top``, ``plain`` or ``both``) this driver
starts ``liveroom serve`` (memory engine, sender rate limits off) with a tier
table that puts the room where asked:

- ``top``: ``LIVEROOM_TIERS=1:8+2``, the seed's top tier (an answer at most
  every 8-10 s per listener) whatever the room's size;
- ``plain``: ``LIVEROOM_TIERS=off``, a plain long poll (every message answers
  every held poll);

then runs one locust process headless with ``--users`` listeners and one
sender at ``--rate`` messages a second (publisher token, not rate-limited), and
measures over the last ``--measure`` seconds of the run (the ramp-up left out):

- **polls/s** the listeners completed, and the **CPU** of the locust process
  (share of one core, from ``/proc`` via psutil);
- **users per process**: listeners / CPU share, i.e. how many such listeners
  one locust process holds at 100 % of a core (the load it can *generate*;
  past about 90 % a saturated locust delays polls, which then shows as fewer
  polls per listener);
- **RSS per user**: (locust's RSS at the end - its RSS with no user) / users.

    python loadtest/bench_locust.py                          # both kinds, 3 000 users
    python loadtest/bench_locust.py --kind top --users 10000 --duration 120

Files go to ``--results`` (locust's CSV and log, the server's log).
"""

from __future__ import annotations

import argparse
import csv
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from bench_hold import Sampler, server, stop
from kit.provenance import commit, invocation, versions

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
TIERS = {"top": "1:8+2", "plain": "off"}


def polls_in(prefix: Path) -> int:
    with open(f"{prefix}_stats.csv") as f:
        return sum(int(row["Request Count"]) for row in csv.DictReader(f)
                   if row["Type"] == "GET" and row["Name"].startswith("/poll"))


def run(kind: str, args: argparse.Namespace, results: Path) -> dict[str, float]:
    token = f"bench-locust-{os.getpid()}-publisher-token"
    prefix = results / f"locust-{kind}"
    with server(REPO, TIERS[kind], results / f"locust-{kind}-server.log", token) as (url, proc):
        port = int(url.rsplit(":", 1)[1])
        room = f"locust-{kind}"
        env = {**os.environ, "PYTHONPATH": str(REPO), "LOADTEST_ROOM": room,
               "LOADTEST_POLL_TIMEOUT": "25", "LOADTEST_SENDERS": "1",
               "LOADTEST_SEND_RATE": f"{args.rate:g}", "LIVEROOM_PUBLISHER_TOKEN": token,
               "LOADTEST_SEND_AS_PUBLISHER": "1"}
        command = [sys.executable, "-m", "locust", "-f", str(HERE / "locustfile.py"),
                   "--headless", "-u", str(args.users + 1), "-r", f"{args.spawn_rate:g}",
                   "-t", f"{args.duration:g}s", "--host", url, "--csv", str(prefix),
                   "--only-summary", "--loglevel", "WARNING", "ListenerUser", "SenderUser"]
        print(f"{kind}: {args.users:,} listeners + 1 sender at {args.rate:g} msg/s for "
              f"{args.duration:g} s", file=sys.stderr, flush=True)
        with open(f"{prefix}_locust.log", "wb") as log:
            locust = subprocess.Popen(command, cwd=REPO, env=env, stdout=log,
                                      stderr=subprocess.STDOUT)
        client = psutil.Process(locust.pid)
        time.sleep(1.0)  # imported, no user yet
        idle_rss = client.memory_info().rss
        sampler = Sampler(port, room, client, psutil.Process(proc.pid))
        sampler.start()
        start = time.time()
        try:
            t1 = start + args.duration - 2
            while time.time() < t1 and locust.poll() is None:
                time.sleep(0.5)
            rss = client.memory_info().rss
            locust.wait(args.duration + 60)
        finally:
            stop(locust, "locust", signal.SIGINT)
            sampler.halt.set()
            sampler.join(5)
        cpu, server_cpu = sampler.cpu_between(t1 - args.measure, t1)
    polls = polls_in(prefix)
    return {"users": args.users, "polls_per_s": polls / args.duration, "cpu": cpu,
            "server_cpu": server_cpu, "users_per_core": args.users / cpu if cpu else 0.0,
            "polls_per_core_s": polls / args.duration / cpu if cpu else 0.0,
            "rss_per_user": (rss - idle_rss) / args.users}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kind", choices=["top", "plain", "both"], default="both")
    parser.add_argument("--users", type=int, default=3000, help="listeners (default 3000)")
    parser.add_argument("--rate", type=float, default=10.0, help="messages a second")
    parser.add_argument("--duration", type=float, default=90.0, help="seconds locust runs")
    parser.add_argument("--measure", type=float, default=40.0,
                        help="seconds measured, ending 2 s before locust stops")
    parser.add_argument("--spawn-rate", type=float, default=500.0)
    parser.add_argument("--results", type=Path, default=None,
                        help="where logs and CSVs go (default: a temporary directory)")
    args = parser.parse_args(argv)
    results = args.results or Path(tempfile.mkdtemp(prefix="bench-locust-"))
    results.mkdir(parents=True, exist_ok=True)
    print(f"command: {invocation('loadtest/bench_locust.py', argv)}")
    print(f"commit {commit()}, {versions()}, {time.strftime('%Y-%m-%d')}; files in {results}\n")
    print("| room | listeners | polls/s | locust CPU | users per process at 100 % | "
          "polls per core-second | RSS per user | server CPU |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for kind in (["top", "plain"] if args.kind == "both" else [args.kind]):
        row = run(kind, args, results)
        print(f"| {kind} ({TIERS[kind]}) | {row['users']:,} | {row['polls_per_s']:,.0f} | "
              f"{row['cpu']:.0%} | {row['users_per_core']:,.0f} | "
              f"{row['polls_per_core_s']:,.0f} | {row['rss_per_user'] / 1024:.1f} KiB | "
              f"{row['server_cpu']:.0%} |", flush=True)


if __name__ == "__main__":
    main()
