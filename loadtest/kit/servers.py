"""The servers the benchmarks measure: started, watched from /proc, stopped.

liveroom (``python -m liveroom serve``), nginx + Nchan, and the Python floor
(``floor_server.py``, or its mypyc build); a throw-away redis-server for
liveroom's redis store (or Nchan's: ``nchan_server(..., redis_url=...)``).

Each server is a child process in a session of its own (Ctrl-C in the
terminal reaches only the benchmark, which stops it), with its open-files
limit raised and a parent-death signal, so it never outlives the benchmark;
``Server.stop`` sends SIGTERM, waits, then kills whatever is left of its
process group. ``Server.cpu`` and ``Server.rss`` sum the process and all its
descendants (nginx master + worker; liveroom and its workers), so nothing the
server does escapes the figures.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import psutil

from kit import LOADTEST, REPO
from kit.builds import BUILT_FLOORS, compiled_env
from kit.machine import cpu_seconds, cpu_times, die_with_parent, raise_nofile

NCHAN_MODULE = Path("/usr/lib/nginx/modules/ngx_nchan_module.so")
ADMIN_TOKEN = "bench-admin-token-0123456789abcdef"
PUBLISHER_TOKEN = "bench-publisher-token-0123456789ab"
SECRET = "bench-ctx-secret-0123456789abcdef"
"""Over a shared store, tokens and the secret have at least 32 bytes."""
FD_RESERVE = 100
"""Descriptors a server process needs besides its held polls (listen socket, logs, ...)."""


def interrupt_on_signals() -> None:
    """Ctrl-C and SIGTERM both raise KeyboardInterrupt in the main thread, so a
    benchmark's ``finally`` blocks stop every child it started."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def child_setup(nofile: int) -> Callable[[], None]:
    """preexec_fn of a server: its open-files limit, and death with this process."""

    def setup() -> None:
        raise_nofile(nofile)
        die_with_parent()

    return setup


class Server:
    """A server under test: a process group this benchmark started and stops."""

    def __init__(self, name: str, proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
        self.name = name
        self.proc = proc
        self.port = port
        self.log = log

    def pids(self) -> list[int]:
        try:
            root = psutil.Process(self.proc.pid)
            return [self.proc.pid, *(c.pid for c in root.children(recursive=True))]
        except psutil.NoSuchProcess:
            return []

    def cpu(self) -> float:
        return cpu_seconds(self.pids())

    def cpu_times(self) -> tuple[float, float]:
        """User and kernel CPU seconds, apart."""
        return cpu_times(self.pids())

    def rss(self) -> int:
        total = 0
        for pid in self.pids():
            with contextlib.suppress(psutil.NoSuchProcess):
                total += psutil.Process(pid).memory_info().rss
        return total

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} exited with status {self.proc.returncode}:\n"
                               f"{self.log_tail()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # anything it left behind


def wait_until(what: str, done: Callable[[], bool], timeout: float, server: Server,
               step: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        server.check_alive()
        if time.monotonic() > deadline:
            raise RuntimeError(f"{server.name}: {what} not within {timeout:.0f} s:\n"
                               f"{server.log_tail()}")
        time.sleep(step)


def wait_quiet(server: Server, timeout: float = 15, idle: float = 0.05) -> None:
    """Until the server spends under ``idle`` of a core over half a second."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        c0, t0 = server.cpu(), time.monotonic()
        time.sleep(0.5)
        if (server.cpu() - c0) / (time.monotonic() - t0) < idle:
            return


def accepts(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@contextlib.contextmanager
def announcing_server(name: str, args: list[str], port: int, tmp: Path, nofile: int,
                      env: Mapping[str, str] | None = None) -> Iterator[Server]:
    """A Python child process run from this checkout (``env`` over this
    process's environment), ready once its log says 'listening on'; stopped on
    exit."""
    log = tmp / f"{name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, *args], stdout=out, stderr=subprocess.STDOUT,
                                cwd=REPO, start_new_session=True,
                                env={**os.environ, **env} if env else None,
                                preexec_fn=child_setup(nofile))
    server = Server(name, proc, port, log)
    try:
        wait_until("the line 'listening on'",
                   lambda: "listening on" in log.read_text(errors="replace"), 60, server)
        yield server
    finally:
        server.stop()


def liveroom_server(tmp: Path, nofile: int, tiers: str | None, store: str | None,
                    workers: int, name: str = "liveroom", extra: Sequence[str] = (),
                    env: Mapping[str, str] | None = None, quiet: bool = True,
                    ) -> contextlib.AbstractContextManager[Server]:
    """``python -m liveroom serve`` from this checkout, with ``extra`` arguments
    and ``env`` (its log is ``tmp/<name>.log``); ``quiet``: ``--log-level
    warning``, else the node's own default level."""
    port = free_port()
    # The bench sizes the server's descriptors for its listeners: the cap on
    # held polls and on connections is that budget, not the defaults' reserves
    # below it.
    args = ["-m", "liveroom", "serve", "--port", str(port),
            "--admin-token", ADMIN_TOKEN, "--publisher-token", PUBLISHER_TOKEN,
            *(["--log-level", "warning"] if quiet else []),
            "--held-max", str(nofile), "--connections-max", str(nofile)]
    if tiers is not None:
        args += ["--tiers", tiers]
    if store:
        args += ["--store", store, "--secret", SECRET, "--auth", "open"]
    if workers > 1:
        args += ["--workers", str(workers)]
    args += extra
    return announcing_server(name, args, port, tmp, nofile, env)


def floor_server(tmp: Path, nofile: int) -> contextlib.AbstractContextManager[Server]:
    """``floor_server.py``, the Python floor."""
    port = free_port()
    return announcing_server("floor", [str(LOADTEST / "floor_server.py"), "--port", str(port)],
                             port, tmp, nofile)


def built_floor_server(name: str, tmp: Path, nofile: int,
                       build: Path) -> contextlib.AbstractContextManager[Server]:
    """The floor ``name`` of :data:`~kit.builds.BUILT_FLOORS`, built into
    ``build``, run in its ``compiled_env``: imported, since a compiled
    module's ``__main__`` block does not run."""
    port = free_port()
    module = BUILT_FLOORS[name][1]
    return announcing_server(name, ["-c", f"import {module}; {module}.main()",
                                    "--port", str(port)], port, tmp, nofile, compiled_env(build))


def nchan_available() -> bool:
    return shutil.which("nginx") is not None and NCHAN_MODULE.exists()


def nginx_config(tmp: Path, port: int, nofile: int, multipart: bool,
                 redis_url: str | None = None, hook_port: int | None = None) -> str:
    """``nchan.conf`` with its @NAMES@ filled in; with ``redis_url``
    (``redis://HOST:PORT``) Nchan keeps its channels in that Redis; with
    ``hook_port``, every publish first goes to hook_backend.py's ``POST
    /nchan`` on that port (``nchan_publisher_upstream_request``)."""
    text = (LOADTEST / "nchan.conf").read_text()
    redis = (f'nchan_redis_url "{redis_url}";\n    nchan_use_redis on;'
             if redis_url else "# channels in Nchan's own memory store")
    upstream = publish = location = "# no backend screens a publish"
    if hook_port is not None:
        upstream = (f"upstream hook_backend {{\n        server 127.0.0.1:{hook_port};\n"
                    f"        keepalive 32;\n    }}")
        publish = "nchan_publisher_upstream_request /upstream_pub;"
        location = ("location = /upstream_pub {\n            internal;\n"
                    "            proxy_pass http://hook_backend/nchan;\n"
                    "            proxy_http_version 1.1;\n"
                    '            proxy_set_header Connection "";\n        }')
    for name, value in {"DIR": str(tmp), "PORT": str(port),
                        "CONNECTIONS": str(max(1024, nofile * 3 // 2)), "NOFILE": str(nofile),
                        "MULTIPART": "on" if multipart else "off", "REDIS": redis,
                        "HOOK_UPSTREAM": upstream, "PUBLISH_HOOK": publish,
                        "HOOK_LOCATION": location}.items():
        text = text.replace(f"@{name}@", value)
    return text


def nchan_server(tmp: Path, nofile: int, multipart: bool, redis_url: str | None = None,
                 hook_port: int | None = None) -> contextlib.AbstractContextManager[Server]:
    """nginx + Nchan from ``nchan.conf``, ready once it accepts and its worker
    runs; its channels in the Redis at ``redis_url`` when one is given; each
    publish screened by the backend on ``hook_port`` when one is given."""
    port = free_port()
    return nginx_server(tmp, "nchan", port,
                        nginx_config(tmp, port, nofile, multipart, redis_url, hook_port),
                        nofile)


HOOK_SECRET = "bench-send-hook-secret-0123456789abcdef"
"""The send hook's secret between a bench's liveroom and its hook backend."""


@contextlib.contextmanager
def hook_backend(tmp: Path, nofile: int) -> Iterator[Server]:
    """loadtest/hook_backend.py, a backend that accepts every send at once
    (liveroom's send hook at ``/hook``, Nchan's upstream at ``/nchan``),
    ready once it accepts connections."""
    port = free_port()
    with announcing_server("hook-backend", [str(LOADTEST / "hook_backend.py"), "--port",
                                            str(port), "--secret", HOOK_SECRET],
                           port, tmp, nofile) as server:
        wait_until("accepting connections", lambda: accepts(port), 30, server)
        yield server


@contextlib.contextmanager
def nginx_server(tmp: Path, name: str, port: int, config: str, nofile: int) -> Iterator[Server]:
    """nginx running ``config`` (which listens on ``port``) from ``tmp``, ready
    once it accepts and its worker runs; stopped on exit."""
    conf = tmp / "nginx.conf"
    conf.write_text(config)
    log = tmp / "error.log"
    cmd = ["nginx", "-p", f"{tmp}/", "-c", str(conf), "-e", str(log)]
    with (tmp / "nginx.out").open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=child_setup(nofile))
    server = Server(name, proc, port, log)
    try:
        wait_until("accepting connections with a worker",
                   lambda: accepts(port) and len(server.pids()) >= 2, 30, server)
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def redis_server(tmp: Path) -> Iterator[Server]:
    """A throw-away ``redis-server`` on a free loopback port, no persistence."""
    if shutil.which("redis-server") is None:
        raise RuntimeError("redis-server not found (apt-get install redis-server)")
    port = free_port()
    log = tmp / "redis.log"
    cmd = ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "",
           "--appendonly", "no", "--dir", str(tmp), "--logfile", str(log)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                            start_new_session=True, preexec_fn=die_with_parent)
    server = Server("redis", proc, port, log)
    try:
        wait_until("accepting connections", lambda: accepts(port), 30, server)
        yield server
    finally:
        server.stop()
