"""How long a node takes to start: from exec to ``/healthz`` answering, against
the time Python takes to import the node's dependencies alone.

First it byte-compiles the checkout (``python -m compileall``), as ``pip
install`` does for an installed package and for the dependencies: otherwise
(``PYTHONDONTWRITEBYTECODE`` set, a fresh checkout) every start would compile
liveroom's sources again, about 60 ms the dependencies never pay. Then each
round runs, one after the other (so a busy machine slows all of them alike):

1. **the dependencies alone**: ``python -c "import aiohttp.web, uvloop,
   httptools, prometheus_client, jwt, msgpack, orjson, click; print()"``,
   from exec to the line it prints: the runtime dependencies of
   pyproject.toml a node imports (aiohttp's server included), and
   ``redis.asyncio`` too with ``--store redis-server``;
2. **the pure build**: ``python -m liveroom serve --port P --log-level
   warning`` from this checkout (memory engine, tokens made up; with
   ``--store redis-server``, over a throw-away redis-server this run starts),
   from exec until ``GET /healthz`` answers 200; then SIGTERM. The benchmark
   waits for the node's "listening on" line before it asks (blocked on the
   pipe, as for the dependencies' line): polling from the start took
   20 ms more here, the polls' own CPU taken from the node on two cores;
3. **the compiled build**, when a compiled tree exists (``--compiled-tree``,
   default build/compiled, made by scripts/build-compiled): the same command
   with ``PYTHONPATH=DIR PYTHONSAFEPATH=1``, checked first to import
   ``proxy.front.server`` as an extension module there.

It prints each round as it goes, then the median and worst of each and the
ratio of each build's median to the dependencies' median, against the target
of issue 33: a node starts in at most 1.3 times its dependencies' import.

    python loadtest/bench_start.py
    python loadtest/bench_start.py --store redis-server
    python loadtest/bench_start.py --runs 5 --no-compiled
    python loadtest/bench_start.py --compiled-tree /tmp/compiled

Bounded: ``--runs`` at most 100, a node not answering within 30 s is an error.
Loopback only; Ctrl-C stops the node it is starting.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import http.client
import os
import platform
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from kit import REPO
from kit.builds import BUILD_COMPILED, check_compiled_tree, compiled_env
from kit.provenance import commit, invocation
from kit.servers import (
    ADMIN_TOKEN,
    PUBLISHER_TOKEN,
    SECRET,
    free_port,
    interrupt_on_signals,
    redis_server,
)

DEPENDENCIES = ("aiohttp.web", "uvloop", "httptools", "prometheus_client", "jwt", "msgpack",
                "orjson", "click")
"""What a node over the memory engine imports of pyproject.toml's runtime
dependencies (redis is the redis engine's, added with ``--store
redis-server``)."""
PACKAGES = ("liveroom", "proxy", "recvsvr", "statsvr")
TARGET = 1.3
START_TIMEOUT = 30.0
PROBE_EVERY = 0.002


def dependencies_ms(modules: Sequence[str]) -> float:
    """Exec of a Python that imports ``modules`` and nothing else, to the line
    it prints once they are imported."""
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", f"import {', '.join(modules)}; print()"],
                            cwd=REPO, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    took = (time.perf_counter() - started) * 1000
    if proc.wait(timeout=START_TIMEOUT) != 0 or line != b"\n":
        raise RuntimeError(f"importing {', '.join(modules)} failed")
    return took


def healthy(port: int) -> bool:
    """Whether ``GET /healthz`` answers 200 now (a refused connection: not yet)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
    try:
        conn.request("GET", "/healthz")
        return conn.getresponse().status == 200
    except OSError:
        return False
    finally:
        conn.close()


def node_ms(env: Mapping[str, str] | None, store: Sequence[str]) -> float:
    """Exec of ``python -m liveroom serve`` (``store``: its store options) to its
    ``/healthz`` answering 200, asked once it says it listens."""
    port = free_port()
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "liveroom", "serve", "--port", str(port),
         "--log-level", "warning", *store], cwd=REPO, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, env={**os.environ, **env} if env else None,
        start_new_session=True)
    assert proc.stdout is not None
    said: list[bytes] = []
    try:
        while not said or b"listening on" not in said[-1]:
            left = START_TIMEOUT - (time.perf_counter() - started)
            if left <= 0 or not select.select([proc.stdout], [], [], left)[0]:
                raise RuntimeError(f"serve did not say it listens within {START_TIMEOUT:.0f} s")
            said.append(proc.stdout.readline())
            if not said[-1]:
                raise RuntimeError(f"serve exited with status {proc.wait()}:\n"
                                   f"{b''.join(said).decode(errors='replace')[-2000:]}")
        while not healthy(port):
            if time.perf_counter() - started > START_TIMEOUT:
                raise RuntimeError(f"serve did not answer /healthz within {START_TIMEOUT:.0f} s")
            time.sleep(PROBE_EVERY)
        return (time.perf_counter() - started) * 1000
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


@contextlib.contextmanager
def store_options(store: str) -> Iterator[list[str]]:
    """The options of ``serve`` for ``--store``: none for the memory engine; a
    throw-away redis-server's URL and the secrets a shared store needs."""
    if store == "memory":
        yield []
        return
    with tempfile.TemporaryDirectory() as tmp, redis_server(Path(tmp)) as redis:
        yield ["--store", f"redis://127.0.0.1:{redis.port}/0", "--auth", "open",
               "--secret", SECRET, "--admin-token", ADMIN_TOKEN,
               "--publisher-token", PUBLISHER_TOKEN]


def summary(name: str, times: list[float], deps: float | None) -> str:
    line = f"  {name:<22} median {statistics.median(times):6.0f} ms, worst {max(times):6.0f} ms"
    if deps is not None:
        ratio = statistics.median(times) / deps
        verdict = "meets" if ratio <= TARGET else "misses"
        line += f"  ratio {ratio:.2f} ({verdict} the target <= {TARGET})"
    return line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    parser.add_argument("--runs", type=int, default=20,
                        help="rounds, each starting every build once (default 20, at most 100)")
    parser.add_argument("--compiled-tree", type=Path, default=REPO / "build" / "compiled",
                        help=f"the compiled tree ({BUILD_COMPILED}; default build/compiled)")
    parser.add_argument("--no-compiled", action="store_true",
                        help="the pure build only, even where a compiled tree exists")
    parser.add_argument("--store", choices=("memory", "redis-server"), default="memory",
                        help="the nodes' store: the memory engine (default), or a "
                        "redis-server this run starts (then the dependencies include redis)")
    args = parser.parse_args(argv)
    if not 1 <= args.runs <= 100:
        parser.error("--runs is between 1 and 100")
    interrupt_on_signals()
    command = invocation("loadtest/bench_start.py", argv)
    builds: dict[str, Mapping[str, str] | None] = {"pure": None}
    if not args.no_compiled:
        if args.compiled_tree.is_dir():
            check_compiled_tree(args.compiled_tree)
            builds["compiled"] = compiled_env(args.compiled_tree.resolve())
        else:
            print(f"no compiled tree at {args.compiled_tree} (build one with "
                  f"{BUILD_COMPILED}): the pure build only", flush=True)
    modules = (*DEPENDENCIES, "redis.asyncio") if args.store == "redis-server" \
        else DEPENDENCIES
    print(f"python -m compileall {' '.join(PACKAGES)} (once, as pip install would)", flush=True)
    subprocess.run([sys.executable, "-m", "compileall", "-q", *PACKAGES], cwd=REPO, check=True)
    deps: list[float] = []
    nodes: dict[str, list[float]] = {name: [] for name in builds}
    print(f"{args.runs} rounds: the dependencies alone, then {' and '.join(builds)} "
          f"to /healthz ({args.store} store)", flush=True)
    with store_options(args.store) as store:
        for run in range(1, args.runs + 1):
            deps.append(dependencies_ms(modules))
            line = f"[{time.strftime('%H:%M:%S')}] round {run:3}/{args.runs}  " \
                   f"dependencies {deps[-1]:5.0f} ms"
            for name, env in builds.items():
                nodes[name].append(node_ms(env, store))
                line += f"  {name} {nodes[name][-1]:5.0f} ms"
            print(line, flush=True)
    base = statistics.median(deps)
    print(f"\nfrom exec to /healthz, {args.runs} runs each ({args.store} store), beside "
          f"importing {', '.join(modules)}:")
    print(summary("dependencies alone", deps, None))
    for name, times in nodes.items():
        print(summary(f"{name} build", times, base))
    print(f"command: {command}\ncommit: {commit()}, Python {platform.python_version()}, "
          f"{os.cpu_count()} cores, {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
