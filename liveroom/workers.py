"""``liveroom serve --workers N``: N worker processes on one port, each a node.

Each worker is a whole node (proxy, recvsvr, statsvr) with a node id of its own,
stable per worker index (``<name>#1`` ... ``<name>#N``), listening on the same
port with ``SO_REUSEPORT``: the kernel spreads connections over the workers and
the shared store makes them one system, exactly as N ``serve`` processes over one
Redis would. The memory engine lives in one process, so more than one worker
needs a shared store.

The supervisor (the process the user started):

- binds the port first, with ``SO_REUSEPORT`` and without listening: it learns
  the port when ``--port 0``, fails at once when another program holds it, and
  keeps it while workers come and go (a bound socket that does not listen gets
  no connections);
- starts the workers as ``python -m liveroom.workers <node id>`` (what ``ps``
  shows), each in a session of its own so a terminal's Ctrl-C reaches only the
  supervisor, which decides; the settings go down the worker's stdin, and each
  worker reports on its stdout when it listens (other output is passed through);
- prints one announcement once every worker listens (the tokens and secret are
  configured: over a shared store no node makes them up);
- restarts a worker that dies, after 0.5 s, doubling up to 30 s while it keeps
  dying within 10 s of its start; a worker that dies before the first
  announcement stops everything instead (exit status 1): a broken setting fails
  fast rather than looping;
- on SIGTERM or SIGINT sends SIGTERM to every worker (each answers its held polls
  and stops, as one ``serve`` does), waits ``stop_timeout`` seconds, kills those
  left, and exits 0. A second signal kills the workers at once.

A worker whose supervisor is gone (even killed with SIGKILL) sees its stdin
closed and stops as if sent SIGTERM: no orphans. Metrics are prometheus-client's
multiprocess mode (see :mod:`liveroom.metrics`) in a temporary directory the
supervisor makes, marks dead workers in, and removes at exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import pickle
import shutil
import signal
import socket
import sys
import tempfile
import threading
from dataclasses import dataclass, field, replace
from typing import Any

from prometheus_client.multiprocess import mark_process_dead

from . import __version__, build
from .clock import SystemClock
from .errors import ConfigError
from .node import Node, run
from .settings import Settings
from .store import open_store

logger = logging.getLogger("liveroom.workers")

READY = "liveroom-worker-ready "
"""Starts the one line a worker writes to its stdout once it listens (JSON follows)."""
_SOURCE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
"""Where this liveroom was imported from: workers import the same one."""


class CannotListen(Exception):
    """The port cannot be bound (another program holds it, a bad address)."""


METRICS_PREFIX = "liveroom-metrics-"
"""A supervisor's metrics directory, in the system's temporary directory, is
named ``liveroom-metrics-<its pid>-<random>``."""


def sweep_metrics_dirs() -> list[str]:
    """Remove the metrics directories of supervisors that died without
    cleaning up (killed with SIGKILL, a crash); returns what was removed. A
    directory whose pid is alive (or not ours to signal) is left alone."""
    removed = []
    base = tempfile.gettempdir()
    with contextlib.suppress(OSError):
        for name in os.listdir(base):
            pid_text = name.removeprefix(METRICS_PREFIX).split("-", 1)[0]
            if not name.startswith(METRICS_PREFIX) or not pid_text.isdigit():
                continue
            try:
                os.kill(int(pid_text), 0)
            except ProcessLookupError:
                path = os.path.join(base, name)
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
            except OSError:
                pass  # alive, under another user
    if removed:
        logger.info("removed %d metrics directories of dead supervisors", len(removed))
    return removed


def node_id(settings: Settings, index: int) -> str:
    """The node id of worker ``index`` (from 1), the same at every restart."""
    return f"{settings.name}#{index}"


def _probe(family: int, kind: int, proto: int, address: tuple[Any, ...], port: int) -> None:
    """Bind ``address`` on ``port`` *without* ``SO_REUSEPORT`` and let it go:
    raises ``OSError`` when anybody listens there, even another supervisor's
    workers (binding with ``SO_REUSEPORT`` would silently join their group,
    and traffic would split between two stores)."""
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        probe.bind((address[0], port, *address[2:]))


def reserve(host: str, port: int) -> tuple[int, list[socket.socket]]:
    """Bind every address of ``host`` on one port (``port``, or one the system
    picks when 0) with ``SO_REUSEPORT``, without listening; returns the port and
    the sockets to keep open. Raises ``OSError`` when the port is taken,
    whether or not its owner shares it with ``SO_REUSEPORT``."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    if port:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            _probe(family, kind, proto, address, port)
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            # What the workers' listening sockets set (asyncio's create_server).
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind((address[0], port, *address[2:]))
            port = sock.getsockname()[1]
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return port, sockets


def _report(line: str) -> dict[str, Any] | None:
    """A worker's report that it listens, or None for a line of other output."""
    if line.startswith(READY):
        with contextlib.suppress(ValueError):
            report = json.loads(line[len(READY):])
            if isinstance(report, dict):
                return report
    return None


def _status(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    return f"exit status {code}"


@dataclass
class _Slot:
    """One worker index and the process serving it now."""

    index: int
    node_id: str
    proc: asyncio.subprocess.Process | None = None
    report: dict[str, Any] | None = None
    listening: asyncio.Event = field(default_factory=asyncio.Event)
    backoff: float = 0.0


class Supervisor:
    """Runs ``count`` workers over ``settings`` until SIGTERM or SIGINT."""

    def __init__(self, settings: Settings, count: int, *, log_level: str = "info",
                 stop_timeout: float = 15.0, min_backoff: float = 0.5,
                 max_backoff: float = 30.0, stable_after: float = 10.0) -> None:
        self.settings = settings
        self.count = count
        self.log_level = log_level
        self.stop_timeout = stop_timeout
        self.min_backoff = min_backoff
        self.max_backoff = max_backoff
        self.stable_after = stable_after
        self._slots: list[_Slot] = []
        self._stopping = asyncio.Event()
        self._announced = False
        self._failure: str | None = None
        self._metrics_dir = ""

    async def run(self) -> int:
        """Serve until told to stop; the exit status (0, or 1 when a worker could
        not start). Raises :class:`~liveroom.errors.ConfigError` for settings
        workers cannot run with and :class:`CannotListen` when the port cannot
        be bound."""
        await self._check_store()
        s = self.settings
        try:
            port, reserved = reserve(s.host, s.port)
        except OSError as exc:
            raise CannotListen(f"cannot listen on {s.host}:{s.port}: "
                               f"{exc.strerror or exc}") from None
        self.settings = s = replace(s, port=port)
        self._slots = [_Slot(i, node_id(s, i)) for i in range(1, self.count + 1)]
        sweep_metrics_dirs()
        self._metrics_dir = tempfile.mkdtemp(prefix=f"{METRICS_PREFIX}{os.getpid()}-")
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._on_signal)
        try:
            keepers = [asyncio.create_task(self._keep(slot), name=f"keep {slot.node_id}")
                       for slot in self._slots]
            await self._wait_listening()
            await self._stopping.wait()
            await self._stop(keepers)
        finally:
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(signum)
            for sock in reserved:
                sock.close()
            shutil.rmtree(self._metrics_dir, ignore_errors=True)
        if self._failure is not None:
            sys.stderr.write(f"liveroom: {self._failure}\n")
            return 1
        return 0

    async def _check_store(self) -> None:
        try:
            engine = open_store(self.settings.store, self.settings.log_policy(),
                                SystemClock(), node_id=self.settings.name)
        except ValueError as exc:
            raise ConfigError("store", str(exc)) from None
        try:
            if engine.name == "memory":
                raise ConfigError("workers", (
                    f"{self.count} workers need a store they can share: the memory store "
                    f"lives inside one process (use --store redis://HOST:PORT/DB, or "
                    f"--workers 1)"))
        finally:
            await engine.close()

    def _on_signal(self) -> None:
        if not self._stopping.is_set():
            logger.info("stopping %d workers", self.count)
            self._stopping.set()
            return
        logger.warning("second signal: killing the workers")
        self._signal_all(signal.SIGKILL)

    def _signal_all(self, signum: int) -> None:
        for slot in self._slots:
            if slot.proc is not None and slot.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    slot.proc.send_signal(signum)

    async def _wait_listening(self) -> None:
        async def everyone() -> None:
            for slot in self._slots:
                await slot.listening.wait()

        waits: list[asyncio.Task[Any]] = [asyncio.create_task(everyone()),
                                           asyncio.create_task(self._stopping.wait())]
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for wait in waits:
            wait.cancel()
        if not self._stopping.is_set():
            self._announced = True
            self._announce()

    def _announce(self) -> None:
        s = self.settings
        first, last = self._slots[0], self._slots[-1]
        report = first.report or {}
        lines = [f"liveroom {__version__}: {self.count} workers (nodes {first.node_id!r} to "
                 f"{last.node_id!r}) listening on http://{s.host}:{s.port} "
                 f"(store: {report.get('store', '?')})"]
        if "build" in report:
            lines.append(f"  build: {report['build']}")
        lines.append("  stop with Ctrl-C")
        sys.stdout.write("\n".join(lines) + "\n")
        sys.stdout.flush()

    async def _stop(self, keepers: list[asyncio.Task[None]]) -> None:
        self._signal_all(signal.SIGTERM)
        _, late = await asyncio.wait(keepers, timeout=self.stop_timeout)
        if late:
            logger.warning("workers still running after %g s: killing them", self.stop_timeout)
            self._signal_all(signal.SIGKILL)
            await asyncio.wait(keepers)

    # -- one worker index ------------------------------------------------------

    async def _keep(self, slot: _Slot) -> None:
        """Run ``slot``'s worker, and again whenever it dies, until stopping."""
        loop = asyncio.get_running_loop()
        while not self._stopping.is_set():
            started = loop.time()
            try:
                code = await self._run_once(slot)
            except OSError as exc:
                logger.error("cannot start worker %s: %s", slot.node_id, exc)
                code = None
            if self._stopping.is_set():
                return
            status = "could not start" if code is None else _status(code)
            if not self._announced:
                self._failure = f"worker {slot.node_id} {status} before listening"
                self._stopping.set()
                return
            lived = loop.time() - started
            if lived >= self.stable_after:
                slot.backoff = self.min_backoff
            else:
                slot.backoff = min(max(slot.backoff * 2, self.min_backoff), self.max_backoff)
            logger.warning("worker %s %s after %.1f s; restarting it in %g s",
                        slot.node_id, status, lived, slot.backoff)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), slot.backoff)

    async def _run_once(self, slot: _Slot) -> int:
        """Start ``slot``'s worker, pass its output on, wait until it exits."""
        env = {k: v for k, v in os.environ.items() if k.lower() != "prometheus_multiproc_dir"}
        env["PROMETHEUS_MULTIPROC_DIR"] = self._metrics_dir
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_SOURCE, env.get("PYTHONPATH")) if p)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "liveroom.workers", slot.node_id,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env=env,
            start_new_session=True)
        slot.proc = proc
        if self._stopping.is_set():
            proc.send_signal(signal.SIGTERM)
        reader = asyncio.create_task(self._read_reports(slot, proc))
        assert proc.stdin is not None
        try:
            # The pipe stays open: the worker stops when it closes (we are gone).
            proc.stdin.write(self._order(slot))
            await proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            pass  # it died already: its status tells why
        code = await proc.wait()
        proc.stdin.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(reader, 5.0)
        mark_process_dead(proc.pid, self._metrics_dir)  # type: ignore[no-untyped-call]
        return code

    def _order(self, slot: _Slot) -> bytes:
        """What ``slot``'s worker reads from its stdin: its settings."""
        return pickle.dumps({"settings": replace(self.settings, node_id=slot.node_id),
                             "log_level": self.log_level})

    async def _read_reports(self, slot: _Slot, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        async for raw in proc.stdout:
            line = raw.decode(errors="replace")
            report = _report(line)
            if report is None:
                with contextlib.suppress(OSError):  # our own stdout may be gone
                    sys.stdout.write(line)
                    sys.stdout.flush()
                continue
            if slot.report is None:
                slot.report = report
            if self._announced:
                logger.info("worker %s (pid %d) listening again", slot.node_id, proc.pid)
            slot.listening.set()


def supervise(settings: Settings, count: int, *, log_level: str = "info") -> int:
    """Run ``count`` workers until SIGTERM or SIGINT; the exit status."""
    return asyncio.run(Supervisor(settings, count, log_level=log_level).run())


# -- the worker process ---------------------------------------------------------

def _stop_with_supervisor() -> None:
    """Wait for the end of stdin (the supervisor is gone), then stop gracefully."""
    while os.read(0, 4096):
        pass
    os.kill(os.getpid(), signal.SIGTERM)


def _report_listening(node: Node) -> None:
    node.metrics.refresh_every(1.0)
    report = {"node": node.settings.name, "pid": os.getpid(), "store": node.store.name,
              "build": build.describe()}
    sys.stdout.write(READY + json.dumps(report) + "\n")
    sys.stdout.flush()


def worker_main() -> None:
    """A worker: read the order from stdin, serve until SIGTERM (or stdin closes)."""
    order = pickle.load(sys.stdin.buffer)
    settings: Settings = order["settings"]
    threading.Thread(target=_stop_with_supervisor, name="supervisor-watch",
                     daemon=True).start()
    logging.basicConfig(level=str(order["log_level"]).upper(),
                        format=f"%(asctime)s %(levelname)s {settings.name} "
                               f"%(name)s: %(message)s")
    run(settings, announce=_report_listening, reuse_port=True)


if __name__ == "__main__":
    worker_main()
