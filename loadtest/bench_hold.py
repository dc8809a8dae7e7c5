"""Adaptive hold, for real: locust listeners in a tiered room vs the simulator.

For each policy asked (``--policy on``, ``off`` or ``both``) this driver

1. starts ``liveroom serve`` (memory engine) on a free 127.0.0.1 port, with the
   tier table in ``LIVEROOM_TIERS`` (``--tiers``, e.g. ``100:8+2`` puts a room
   of 100 or more listeners in the top tier; ``off`` for the policy-off run)
   and sender rate limits off, so the senders are never refused;
2. runs locust headless, bounded by ``--duration`` (``-t``): ``--listeners``
   ``ListenerUser``s (``--off-listeners`` for the policy-off run) polling one
   room again at once after every answer, one ``SenderUser`` sending ``--rate``
   normal messages a second and one ``ImportantSenderUser`` sending an
   important message every ``--important-every`` seconds (both evenly spaced,
   locust's ``constant_throughput``, with the publisher token);
3. meanwhile samples the CPU time of the locust process (so a saturated
   client is visible: near 100 % of one core it is the client, not the server,
   that sets the pace) and of the server, the room's online count, and the
   loopback round trip of ``GET /healthz``;
4. reads the per-poll records the locustfile writes (``LOADTEST_REPORT``) and
   measures over the last ``--measure`` seconds (ending 2 s before locust
   stops, so the ramp-up is left out): **requests per listener per minute**
   (polls sent), the messages each listener received (the real send rates),
   the answers' ``interval_ms``, empty answers, and the delivery latency of
   important messages (sender's clock to the listener's; one host);
5. runs ``sim_hold`` with the same parameters: room size = listeners, the same
   tiers, rate, fixed arrivals, window, and the round trip measured here (the
   listener's pause between an answer and its next poll, plus the median
   ``/healthz`` round trip; both tiny on loopback), averaged over ``--seeds``
   seeds; and prints both figures and their difference (``--tolerance``, 10 %).

Everything is stopped at the end, also on Ctrl-C. Files go to
``--results`` (``loadtest/results/hold-<policy>*``: locust's CSVs, the per-poll
report, the server's log).

    python loadtest/bench_hold.py                         # on (1500) then off (500)
    python loadtest/bench_hold.py --policy on --listeners 2000 --duration 180
    python loadtest/bench_hold.py --policy off --off-listeners 300 --json
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import io
import json
import math
import os
import signal
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import psutil
from sim_hold import Scenario, simulate

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
EDGE = 2.0
"""Seconds left out at the end of the run (locust stopping its users)."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def cpu_seconds(proc: psutil.Process) -> float:
    """User + system CPU of a process and its children (locust --processes)."""
    total = 0.0
    for p in [proc, *proc.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            times = p.cpu_times()
            total += times.user + times.system
    return total


# -- the server ----------------------------------------------------------------------


@contextlib.contextmanager
def server_tree(commit: str | None) -> Iterator[tuple[Path, str]]:
    """Where the server's code comes from: this working tree (other people's
    unfinished edits included), or ``commit`` exported with ``git archive`` to
    a temporary directory (the tree is not touched)."""
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", commit or "HEAD"],
                          capture_output=True, text=True, check=False).stdout.strip()
    if not commit:
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain",
                                "--untracked-files=no"],
                               capture_output=True, text=True, check=False).stdout.strip()
        yield REPO, f"working tree at {head or '?'}" + (" with uncommitted changes"
                                                         if dirty else "")
        return
    if not head:
        raise SystemExit(f"no such commit: {commit}")
    with tempfile.TemporaryDirectory(prefix="liveroom-") as tmp:
        archive = subprocess.run(["git", "-C", str(REPO), "archive", head],
                                 capture_output=True, check=True).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        yield Path(tmp), f"commit {head}"


def serve_help(tree: Path) -> str:
    out = subprocess.run([sys.executable, "-m", "liveroom", "serve", "--help"], cwd=tree,
                         capture_output=True, text=True, check=False,
                         env={**os.environ, "PYTHONPATH": str(tree)})
    return out.stdout + out.stderr


@contextlib.contextmanager
def server(tree: Path, tiers: str, log_path: Path,
           token: str) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``liveroom serve`` from ``tree`` on a free loopback port with
    ``LIVEROOM_TIERS=tiers`` and the sender rate limits off."""
    usage = serve_help(tree)
    if "--tiers" not in usage:
        raise SystemExit("liveroom serve has no --tiers/LIVEROOM_TIERS yet: the traffic "
                         "control commit is not in this tree")
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(tree), "LIVEROOM_TIERS": tiers}
    args = [sys.executable, "-m", "liveroom", "serve", "--host", "127.0.0.1",
            "--port", str(port), "--admin-token", f"admin-{token}",
            "--publisher-token", token, "--log-level", "warning"]
    if "--rate-limits" in usage:
        args += ["--rate-limits", "off"]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(args, cwd=tree, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while healthz(port) is None:
            if proc.poll() is not None:
                raise SystemExit(f"liveroom serve exited ({proc.returncode}); see {log_path}")
            if time.monotonic() > deadline:
                raise SystemExit(f"liveroom serve did not answer within 30 s; see {log_path}")
            time.sleep(0.1)
        yield url, proc
    finally:
        stop(proc, "liveroom serve")


def stop(proc: subprocess.Popen[bytes], what: str, sig: int = signal.SIGTERM) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            print(f"  {what} did not stop in 15 s: killing it", file=sys.stderr)
            proc.kill()
            proc.wait(5)


def healthz(port: int) -> float | None:
    """One ``GET /healthz`` round trip in seconds, or None if it failed."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        t0 = time.perf_counter()
        conn.request("GET", "/healthz")
        conn.getresponse().read()
        return time.perf_counter() - t0
    except OSError:
        return None
    finally:
        conn.close()


def room_online(port: int, room: str) -> int | None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", f"/v1/rooms/{room}/stats")
        return int(json.loads(conn.getresponse().read())["online"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    finally:
        conn.close()


# -- one run ------------------------------------------------------------------------


@dataclass
class Plan:
    policy: str
    tiers: str
    listeners: int
    rate: float
    important_every: float
    duration: float
    measure: float
    spawn_rate: float
    poll_timeout: int
    results: Path
    seeds: int
    tolerance: float
    commit: str | None = None
    server_code: str = ""


@dataclass
class Measured:
    """What the real run measured over its window."""

    policy: str
    tiers: str
    listeners: int
    listeners_seen: int
    window_s: float
    requests_per_listener_min: float
    per_listener_min_p10: float
    per_listener_min_p90: float
    normal_per_s: float
    important_per_s: float
    empty_share: float
    interval_ms: list[int]
    important_p50_ms: float
    important_p99_ms: float
    important_max_ms: float
    important_received: int
    important_lost: int
    """(listener, important message) pairs sent after the listener's first answer
    and 3 s before the end, never received."""
    important_twice: int
    pause_p50_ms: float
    pause_p99_ms: float
    healthz_p50_ms: float
    locust_cpu: float
    """Share of one core the locust process used over the window."""
    server_cpu: float
    polls_total: int
    failures: dict[str, int] = field(default_factory=dict)


class Sampler(threading.Thread):
    """Every second: CPU of locust and the server, the room's online count, and
    one /healthz round trip; prints a progress line every ``every`` seconds."""

    def __init__(self, port: int, room: str, client: psutil.Process,
                 server_proc: psutil.Process, every: float = 10.0) -> None:
        super().__init__(daemon=True)
        self.port, self.room = port, room
        self.client, self.server_proc = client, server_proc
        self.every = every
        self.samples: list[tuple[float, float, float, int | None]] = []
        self.rtts: list[float] = []
        self.halt = threading.Event()

    def run(self) -> None:
        start = time.time()
        last_print = start
        while not self.halt.wait(1.0):
            now = time.time()
            rtt = healthz(self.port)
            if rtt is not None:
                self.rtts.append(rtt)
            online = room_online(self.port, self.room)
            self.samples.append((now, cpu_seconds(self.client), cpu_seconds(self.server_proc),
                                 online))
            if now - last_print >= self.every and len(self.samples) >= 2:
                last_print = now
                (t0, c0, s0, _), (t1, c1, s1, _) = self.samples[-11:][0], self.samples[-1]
                span = max(t1 - t0, 1e-9)
                print(f"  t={now - start:5.0f} s  online {online}  locust CPU "
                      f"{(c1 - c0) / span:4.0%}  server CPU {(s1 - s0) / span:4.0%}  "
                      f"/healthz {rtt * 1000 if rtt else math.nan:.1f} ms",
                      file=sys.stderr, flush=True)

    def cpu_between(self, t0: float, t1: float) -> tuple[float, float]:
        inside = [s for s in self.samples if t0 <= s[0] <= t1]
        if len(inside) < 2:
            return math.nan, math.nan
        (a, c0, s0, _), (b, c1, s1, _) = inside[0], inside[-1]
        return (c1 - c0) / (b - a), (s1 - s0) / (b - a)


def run_locust(plan: Plan, url: str, port: int, token: str,
               server_proc: subprocess.Popen[bytes]) -> tuple[dict[str, object], Sampler]:
    room = f"hold-{plan.policy}-{os.getpid()}"
    prefix = plan.results / f"hold-{plan.policy}"
    report = Path(f"{prefix}_polls.json")
    report.unlink(missing_ok=True)
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "LOADTEST_ROOM": room,
        "LOADTEST_POLL_TIMEOUT": str(plan.poll_timeout),
        "LOADTEST_SENDERS": "1",
        "LOADTEST_SEND_RATE": f"{plan.rate:g}",
        "LOADTEST_IMPORTANT_EVERY": "0",
        "LOADTEST_IMPORTANT_RATE": f"{1 / plan.important_every:g}" if plan.important_every else "0",
        "LIVEROOM_PUBLISHER_TOKEN": token,
        "LOADTEST_SEND_AS_PUBLISHER": "1",
        "LOADTEST_REPORT": str(report),
    }
    users = plan.listeners + 1 + (1 if plan.important_every else 0)
    classes = ["ListenerUser", "SenderUser"] + (
        ["ImportantSenderUser"] if plan.important_every else [])
    args = [sys.executable, "-m", "locust", "-f", str(HERE / "locustfile.py"), "--headless",
            "-u", str(users), "-r", f"{plan.spawn_rate:g}", "-t", f"{plan.duration:g}s",
            "--host", url, "--csv", str(prefix), "--only-summary", "--loglevel", "WARNING",
            *classes]
    log_path = Path(f"{prefix}_locust.log")
    print(f"  locust: {plan.listeners} listeners + senders ({plan.rate:g} msg/s, one important "
          f"every {plan.important_every:g} s) for {plan.duration:g} s; log {log_path}",
          file=sys.stderr, flush=True)
    with open(log_path, "wb") as log:
        locust = subprocess.Popen(args, cwd=REPO, env=env, stdout=log,
                                  stderr=subprocess.STDOUT)
    sampler = Sampler(port, room, psutil.Process(locust.pid), psutil.Process(server_proc.pid))
    sampler.start()
    try:
        locust.wait(plan.duration + 60)
    except subprocess.TimeoutExpired:
        print("  locust overran its -t by 60 s: stopping it", file=sys.stderr)
    finally:
        stop(locust, "locust", signal.SIGINT)
        sampler.halt.set()
        sampler.join(5)
    if not report.exists():
        raise SystemExit(f"locust wrote no report ({report}); see {log_path}")
    return json.loads(report.read_text()), sampler


def failures(prefix: Path) -> dict[str, int]:
    """Failure counts by request name, from locust's _failures.csv."""
    path = Path(f"{prefix}_failures.csv")
    counts: dict[str, int] = {}
    if path.exists():
        import csv

        with open(path) as f:
            for row in csv.DictReader(f):
                key = f"{row['Method']} {row['Name']}: {row['Error']}"
                counts[key] = counts.get(key, 0) + int(row["Occurrences"])
    return counts


def measure(plan: Plan, report: dict[str, object], sampler: Sampler) -> Measured:
    polls: list[list[float]] = report["polls"]  # type: ignore[assignment]
    important: list[list[float]] = report["important"]  # type: ignore[assignment]
    if not polls:
        raise SystemExit("no polls recorded")
    t_start = min(p[1] for p in polls)
    t1 = t_start + plan.duration - EDGE
    t0 = t1 - plan.measure
    inside = [p for p in polls if t0 <= p[1] < t1]
    per: dict[int, int] = {}
    received: dict[int, list[int]] = {}
    for p in inside:
        per[int(p[0])] = per.get(int(p[0]), 0) + 1
        got = received.setdefault(int(p[0]), [0, 0])
        got[0] += int(p[4])
        got[1] += int(p[5])
    minutes = plan.measure / 60
    counts = sorted(c / minutes for c in per.values())
    rate = len(inside) / plan.listeners / minutes
    pauses = [p[3] for p in inside if p[3] >= 0]
    lat = [x[1] - x[2] for x in important if t0 <= x[1] < t1]
    lost, twice = important_check(polls, important,
                                  report.get("important_sent") or [],  # type: ignore[arg-type]
                                  t_start + plan.duration - 3.0)
    locust_cpu, server_cpu = sampler.cpu_between(t0, t1)
    return Measured(
        policy=plan.policy, tiers=plan.tiers, listeners=plan.listeners,
        listeners_seen=len(per), window_s=plan.measure,
        requests_per_listener_min=rate,
        per_listener_min_p10=percentile(counts, 0.10),
        per_listener_min_p90=percentile(counts, 0.90),
        normal_per_s=statistics.median(r[0] for r in received.values()) / plan.measure,
        important_per_s=statistics.median(r[1] for r in received.values()) / plan.measure,
        empty_share=sum(1 for p in inside if p[4] == 0 and p[5] == 0) / max(1, len(inside)),
        interval_ms=sorted({int(p[6]) for p in inside}),
        important_p50_ms=percentile(lat, 0.5) * 1000,
        important_p99_ms=percentile(lat, 0.99) * 1000,
        important_max_ms=max(lat, default=math.nan) * 1000,
        important_received=len(lat), important_lost=lost, important_twice=twice,
        pause_p50_ms=percentile(pauses, 0.5) * 1000,
        pause_p99_ms=percentile(pauses, 0.99) * 1000,
        healthz_p50_ms=percentile(sampler.rtts, 0.5) * 1000,
        locust_cpu=locust_cpu, server_cpu=server_cpu, polls_total=len(polls),
        failures=failures(plan.results / f"hold-{plan.policy}"),
    )


def important_check(polls: list[list[float]], important: list[list[float]],
                    sent: list[float], cutoff: float) -> tuple[int, int]:
    """Important messages lost and received twice, over the whole run: every
    listener must receive every important message sent after its first answer
    (plus half a second, as the first answer carries no old important ones)
    and before ``cutoff``, exactly once."""
    first: dict[int, float] = {}
    for p in polls:
        if p[3] < 0:  # a first poll
            first[int(p[0])] = min(first.get(int(p[0]), math.inf), p[2])
    got: dict[int, list[float]] = {}
    for listener, _, sent_at in important:
        got.setdefault(int(listener), []).append(sent_at)
    lost = twice = 0
    for listener, since in first.items():
        expected = {s for s in sent if since + 0.5 < s < cutoff}
        received = got.get(listener, [])
        twice += len(received) - len(set(received))
        lost += len(expected - set(received))
    return lost, twice


def simulated(plan: Plan, m: Measured) -> dict[str, float]:
    """sim_hold with the run's parameters, averaged over ``plan.seeds`` seeds."""
    rtt_median = (m.pause_p50_ms + m.healthz_p50_ms) / 1000
    rtt_p99 = max(rtt_median, (m.pause_p99_ms + m.healthz_p50_ms) / 1000)
    base = Scenario(
        room=plan.listeners, rate=plan.rate, policy=plan.tiers != "off",
        tiers=plan.tiers if plan.tiers != "off" else "", arrivals="fixed",
        important_every=plan.important_every, timeout=plan.poll_timeout,
        rtt_median=rtt_median, rtt_p99=rtt_p99, sample=plan.listeners,
        join=plan.listeners / plan.spawn_rate,
        warmup=plan.duration - EDGE - plan.measure, window=plan.measure)
    runs = [simulate(replace(base, seed=seed)) for seed in range(1, plan.seeds + 1)]
    return {
        "requests_per_listener_min": statistics.mean(r.requests_per_listener_min for r in runs),
        "requests_per_listener_min_min": min(r.requests_per_listener_min for r in runs),
        "requests_per_listener_min_max": max(r.requests_per_listener_min for r in runs),
        "important_p50_ms": statistics.mean(r.important_p50_ms for r in runs),
        "important_p99_ms": statistics.mean(r.important_p99_ms for r in runs),
        "important_max_ms": max(r.important_max_ms for r in runs),
        "important_lost": sum(r.important_lost for r in runs),
        "empty_share": statistics.mean(r.empty_share for r in runs),
        "rtt_median_ms": rtt_median * 1000,
        "rtt_p99_ms": rtt_p99 * 1000,
        "seeds": plan.seeds,
    }


def run_one(plan: Plan) -> dict[str, object]:
    print(f"\n== policy {plan.policy}: LIVEROOM_TIERS={plan.tiers}, {plan.listeners} "
          f"listeners ==", file=sys.stderr, flush=True)
    token = f"pub-{os.getpid()}"
    log_path = plan.results / f"hold-{plan.policy}_server.log"
    with server_tree(plan.commit) as (tree, code), \
            server(tree, plan.tiers, log_path, token) as (url, proc):
        plan.server_code = code
        print(f"  server: {code}, {url}; log {log_path}", file=sys.stderr, flush=True)
        port = int(url.rsplit(":", 1)[1])
        report, sampler = run_locust(plan, url, port, token, proc)
    m = measure(plan, report, sampler)
    sim = simulated(plan, m)
    diff = m.requests_per_listener_min / sim["requests_per_listener_min"] - 1
    return {"plan": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(plan).items()},
            "measured": asdict(m), "simulated": sim, "difference": diff,
            "within_tolerance": abs(diff) <= plan.tolerance,
            "ok": abs(diff) <= plan.tolerance and m.important_lost == 0
            and m.important_twice == 0 and sim["important_lost"] == 0}


def render(result: dict[str, object]) -> str:
    m: dict[str, object] = result["measured"]  # type: ignore[assignment]
    s: dict[str, float] = result["simulated"]  # type: ignore[assignment]
    p: dict[str, object] = result["plan"]  # type: ignore[assignment]
    diff = float(result["difference"])  # type: ignore[arg-type]
    ok = "within" if result["within_tolerance"] else "OUTSIDE"
    fails = m["failures"] or {}
    lines = [
        f"policy {m['policy']} (LIVEROOM_TIERS={m['tiers']}): {m['listeners']} listeners "
        f"({m['listeners_seen']} seen), last {m['window_s']:g} s of a {p['duration']:g} s run; "
        f"server: {p['server_code']}",
        f"  messages received per listener: {m['normal_per_s']:.2f} normal/s, "
        f"{m['important_per_s']:.3f} important/s; answers' interval_ms {m['interval_ms']}; "
        f"empty answers {m['empty_share']:.1%}",
        f"  requests per listener per minute: real {m['requests_per_listener_min']:.2f} "
        f"(listeners p10 {m['per_listener_min_p10']:.1f}, p90 {m['per_listener_min_p90']:.1f}), "
        f"simulated {s['requests_per_listener_min']:.2f} "
        f"({s['seeds']:g} seeds {s['requests_per_listener_min_min']:.2f}-"
        f"{s['requests_per_listener_min_max']:.2f}): {diff:+.1%}, {ok} "
        f"{float(p['tolerance']):.0%}",  # type: ignore[arg-type]
        f"  room requests/s: real {m['requests_per_listener_min'] * m['listeners'] / 60:.1f}, "
        f"simulated {s['requests_per_listener_min'] * float(m['listeners']) / 60:.1f}",  # type: ignore[arg-type]
        f"  important latency (sender -> listener) ms: real p50 {m['important_p50_ms']:.0f}, "
        f"p99 {m['important_p99_ms']:.0f}, max {m['important_max_ms']:.0f} "
        f"({m['important_received']} deliveries), lost {m['important_lost']}, twice "
        f"{m['important_twice']}; simulated (to the answer leaving) p50 "
        f"{s['important_p50_ms']:.0f}, p99 {s['important_p99_ms']:.0f}, max "
        f"{s['important_max_ms']:.0f}, lost {s['important_lost']:g}",
        f"  round trip used by the simulator: median {s['rtt_median_ms']:.1f} ms, p99 "
        f"{s['rtt_p99_ms']:.1f} ms (listener's pause p50 {m['pause_p50_ms']:.1f} / p99 "
        f"{m['pause_p99_ms']:.1f} ms + /healthz {m['healthz_p50_ms']:.1f} ms)",
        f"  CPU over the window (share of one core): locust {m['locust_cpu']:.0%}, "
        f"server {m['server_cpu']:.0%}  (2-core machine; locust near 100 % = client-bound)",
        f"  failures: {sum(fails.values())}"  # type: ignore[union-attr]
        + "".join(f"\n    {k}: {v}" for k, v in fails.items()),  # type: ignore[union-attr]
    ]
    return "\n".join(lines)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


class _Formatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The docstring as written, and every option's default."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=_Formatter)
    parser.add_argument("--policy", choices=("on", "off", "both"), default="both",
                        help="the tiered run, the plain long-poll run, or both (on first)")
    parser.add_argument("--tiers", default="100:8+2",
                        help="LIVEROOM_TIERS of the policy-on run (the off run uses 'off')")
    parser.add_argument("--listeners", type=int, default=1500,
                        help="listeners of the policy-on run")
    parser.add_argument("--off-listeners", type=int, default=500,
                        help="listeners of the policy-off run (at most 500: each polls "
                             "about once a second)")
    parser.add_argument("--rate", type=float, default=1.0, help="normal messages a second")
    parser.add_argument("--important-every", type=float, default=10.0,
                        help="seconds between important messages (0: none)")
    parser.add_argument("--duration", type=float, default=120.0, help="locust -t, seconds")
    parser.add_argument("--measure", type=float, default=60.0,
                        help="seconds measured, ending 2 s before locust stops")
    parser.add_argument("--spawn-rate", type=float, default=100.0, help="locust -r")
    parser.add_argument("--poll-timeout", type=int, default=25,
                        help="the listeners' poll timeout, seconds")
    parser.add_argument("--seeds", type=int, default=5, help="simulator runs averaged")
    parser.add_argument("--tolerance", type=float, default=0.10,
                        help="largest relative difference real vs simulated requests "
                             "for exit status 0")
    parser.add_argument("--results", type=Path, default=HERE / "results",
                        help="where locust's CSVs, the per-poll reports and logs go")
    parser.add_argument("--commit",
                        help="run the server of this commit (git archive to a temporary "
                             "directory) instead of the working tree")
    parser.add_argument("--json", action="store_true", help="print JSON, not the text")
    args = parser.parse_args(argv)
    if args.off_listeners > 500:
        parser.error("--off-listeners: at most 500 (one locust process, ~1 poll/s each)")
    if args.measure > args.duration - EDGE - 10:
        parser.error("--measure must leave at least 12 s of the run for the ramp-up")
    args.results.mkdir(parents=True, exist_ok=True)
    plans = []
    for policy in ("on", "off") if args.policy == "both" else (args.policy,):
        plans.append(Plan(
            policy=policy, tiers=args.tiers if policy == "on" else "off",
            listeners=args.listeners if policy == "on" else args.off_listeners,
            rate=args.rate, important_every=args.important_every, duration=args.duration,
            measure=args.measure, spawn_rate=args.spawn_rate, poll_timeout=args.poll_timeout,
            results=args.results, seeds=args.seeds, tolerance=args.tolerance,
            commit=args.commit))
    # Ctrl-C and SIGTERM unwind through the context managers, which stop locust
    # and the server (also when started in the background, where SIGINT comes
    # in ignored).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    results = []
    try:
        for plan in plans:
            results.append(run_one(plan))
            if not args.json:
                print(render(results[-1]), flush=True)
    except KeyboardInterrupt:
        print("\ninterrupted: server and locust stopped", file=sys.stderr)
        return 130
    if args.json:
        json.dump(results, sys.stdout, indent=1)
        print()
    elif len(results) == 2:
        on, off = (r["measured"]["requests_per_listener_min"] for r in results)  # type: ignore[index]
        print(f"\nreal: the policy cuts requests per listener by {1 - on / off:.1%} "
              f"({on:.1f} vs {off:.1f} a minute)")
    # Exit status 1 when a run is off the simulator by more than the tolerance
    # or an important message was lost or received twice.
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
