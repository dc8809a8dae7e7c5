"""``liveroom serve --workers N``: real supervisor and worker processes on one port
over the real Redis, driven through real sockets.

Each request of a ``fresh`` session opens a new connection, so the kernel
(``SO_REUSEPORT``) hands it to either worker: a listener hops between workers
the way it would between nodes behind a load balancer.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Collection
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis.asyncio
from click.testing import CliRunner
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.mmap_dict import MmapedDict, mmap_key
from prometheus_client.multiprocess import MultiProcessCollector
from support import ADMIN, ADMIN_HEADERS, PUBLISHER, SHARED_SECRET, Listener, clean_env, send

import liveroom
from liveroom.cli import main
from liveroom.metrics import WorkerFiles
from liveroom.settings import Settings
from liveroom.workers import Supervisor

WORKER = re.compile(r"-m liveroom\.workers (\S+)$")


pytestmark = pytest.mark.usefixtures("no_liveroom_env")


SECRETS = {"admin_token": ADMIN, "publisher_token": PUBLISHER, "secret": SHARED_SECRET}
TOKENS = {"LIVEROOM_ADMIN_TOKEN": ADMIN, "LIVEROOM_PUBLISHER_TOKEN": PUBLISHER,
          "LIVEROOM_SECRET": SHARED_SECRET, "LIVEROOM_RATE_LIMITS": "off",
          "LIVEROOM_AUTH": "open"}


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a process, None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    state, ppid = text.rsplit(")", 1)[1].split()[:2]
    return state, int(ppid)


def alive(pid: int) -> bool:
    """Whether any thread of a process still runs. A thread group's leader shows
    as a zombie as soon as it exits, while other threads may still be running
    (and holding the process's sockets open)."""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in threads:
        try:
            text = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue
        if text.rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
            return True
    return False


def workers_of(supervisor: int) -> dict[str, int]:
    """The live worker processes of a supervisor: node id -> pid (from what
    ``ps`` shows)."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        stat = _stat(int(entry))
        if stat is None or stat[1] != supervisor or stat[0] == "Z":
            continue
        with suppress(OSError):
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            named = WORKER.search(cmdline.replace(b"\0", b" ").decode().strip())
            if named:
                found[named.group(1)] = int(entry)
    return found


def metrics_dir_of(pid: int) -> Path:
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    for item in environ:
        name, _, value = item.decode().partition("=")
        if name == "PROMETHEUS_MULTIPROC_DIR":
            return Path(value)
    raise AssertionError("the worker has no PROMETHEUS_MULTIPROC_DIR")


@dataclass
class Supervised:
    proc: asyncio.subprocess.Process
    url: str
    port: int
    announcement: list[str]
    stderr: Path

    def workers(self) -> dict[str, int]:
        return workers_of(self.proc.pid)

    async def wait_workers(self, count: int, *, besides: Collection[int] = (),
                           within: float = 20) -> dict[str, int]:
        """The workers, once ``count`` of them live and none is in ``besides``."""
        async with asyncio.timeout(within):
            while True:
                found = self.workers()
                if len(found) == count and not set(besides) & set(found.values()):
                    return found
                await asyncio.sleep(0.05)


@asynccontextmanager
async def supervisor(tmp_path: Path, *args: str, env: dict[str, str] | None = None,
                     workers: int = 2) -> AsyncIterator[Supervised]:
    """``liveroom serve --workers N --port 0``, once it announced; stopped (and
    its workers with it) on exit."""
    stderr_path = tmp_path / "supervisor.log"
    with stderr_path.open("wb") as stderr:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "liveroom", "serve", "--port", "0",
            "--workers", str(workers), *args, stdout=asyncio.subprocess.PIPE,
            stderr=stderr, env=clean_env(**TOKENS) if env is None else env)
    seen: set[int] = set()
    try:
        assert proc.stdout is not None
        lines: list[str] = []
        try:
            async with asyncio.timeout(30):
                while not lines or "stop with Ctrl-C" not in lines[-1]:
                    raw = await proc.stdout.readline()
                    if not raw:
                        raise AssertionError(f"exited before announcing: {lines}")
                    lines.append(raw.decode().rstrip())
        except (AssertionError, TimeoutError):
            raise AssertionError(stderr_path.read_text()) from None
        found = re.search(r"listening on (http://127\.0\.0\.1:(\d+))", lines[0])
        assert found, lines
        running = Supervised(proc, found.group(1), int(found.group(2)), lines, stderr_path)
        seen.update(running.workers().values())
        yield running
    finally:
        seen.update(workers_of(proc.pid).values())
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 30)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        # Whatever happened, no worker of this test outlives it.
        with suppress(TimeoutError):
            async with asyncio.timeout(10):
                while any(alive(pid) for pid in seen):
                    await asyncio.sleep(0.05)
        for pid in seen:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


@asynccontextmanager
async def fresh() -> AsyncIterator[aiohttp.ClientSession]:
    """A client that opens a new connection for every request."""
    async with aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(force_close=True, limit=200)) as session:
        yield session


async def scrape(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    async with session.get(f"{url}/metrics", headers=ADMIN_HEADERS) as resp:
        assert resp.status == 200
        text = await resp.text()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


async def scrape_until(session: aiohttp.ClientSession, url: str, name: str, value: float,
                       within: float = 15) -> dict[str, float]:
    """Scrape (a new connection each time: any worker) until ``name`` reads
    ``value`` three times in a row."""
    streak = 0
    async with asyncio.timeout(within):
        while True:
            samples = await scrape(session, url)
            streak = streak + 1 if samples.get(name) == value else 0
            if streak == 3:
                return samples
            await asyncio.sleep(0.05)


async def hold(session: aiohttp.ClientSession, url: str, room: str,
               count: int) -> tuple[list[dict[str, Any]], list[asyncio.Task[dict[str, Any]]]]:
    """``count`` listeners caught up in ``room``, each holding a poll (on its own
    connection); their first answers and the held polls."""
    listeners = [Listener(session, room, uid=f"u{i}") for i in range(count)]
    firsts = await asyncio.gather(*(lst.poll(url) for lst in listeners))
    polls = [asyncio.create_task(lst.poll(url, timeout=60)) for lst in listeners]
    return firsts, polls


def check_delivery(listener: Listener, count: int) -> None:
    """Every message once, each list in order, no reset."""
    seqs = [m["seq"] for m in listener.received]
    assert sorted(seqs) == list(range(1, count + 1)), seqs
    for important in (True, False):
        kind = [m["seq"] for m in listener.received if m["important"] is important]
        assert kind == sorted(kind)
    assert not any(answer["reset"] for answer in listener.answers)


# -- one system ------------------------------------------------------------------

async def test_two_workers_on_one_port_act_as_one_system(tmp_path: Path,
                                                         redis_url: str) -> None:
    async with supervisor(tmp_path, "--store", redis_url) as running, fresh() as session:
        port = running.port
        assert running.announcement[0].startswith(
            f"liveroom {liveroom.__version__}: 2 workers "
            f"(nodes '127.0.0.1:{port}#1' to '127.0.0.1:{port}#2') "
            f"listening on http://127.0.0.1:{port} (store: redis)")
        # Two processes, named by their stable node ids.
        workers = running.workers()
        assert set(workers) == {f"127.0.0.1:{port}#1", f"127.0.0.1:{port}#2"}
        assert len(set(workers.values())) == 2

        listener = Listener(session, "one")
        await listener.poll(running.url)
        for i in range(20):
            await send(session, running.url, "one", i, important=i % 4 == 0)
            await listener.poll(running.url, timeout=5)
        async with asyncio.timeout(20):
            while len(listener.received) < 20:
                await listener.poll(running.url, timeout=2)
        check_delivery(listener, 20)

        # Polls landed on both workers, each a statsvr node of its own: both
        # wrote the room's online shard.
        await asyncio.gather(*(Listener(session, "one", uid=f"v{i}").poll(running.url)
                               for i in range(20)))
        client = redis.asyncio.Redis.from_url(redis_url)
        try:
            async with asyncio.timeout(10):
                while True:
                    fields = await client.hkeys("lr:{one}:sidx")
                    nodes = {f.decode().split("/")[0] for f in fields}
                    if nodes == set(workers):
                        break
                    await asyncio.sleep(0.1)
        finally:
            await client.aclose()


async def test_workers_over_redis_refuse_to_make_up_tokens(tmp_path: Path,
                                                           redis_url: str) -> None:
    # Tokens made up and kept in the store split the nodes once the store lost
    # them: with Redis they must be configured, on every node alike.
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "liveroom", "serve", "--workers", "2", "--port", "0",
        "--store", redis_url, "--auth", "open", stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env=clean_env(LIVEROOM_RATE_LIMITS="off"))
    stdout, stderr = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 2
    text = " ".join(stderr.decode().split())
    assert "--admin-token, --publisher-token, --secret" in text, text
    assert stdout == b""


# -- metrics ---------------------------------------------------------------------

async def test_metrics_sum_over_the_workers(tmp_path: Path, redis_url: str) -> None:
    async with supervisor(tmp_path, "--store", redis_url) as running, \
            fresh() as session, aiohttp.ClientSession() as holders:
        samples = await scrape(session, running.url)
        assert samples["liveroom_workers"] == 2
        assert samples["liveroom_held_polls"] == 0

        firsts, polls = await hold(holders, running.url, "m", 20)
        samples = await scrape_until(session, running.url, "liveroom_held_polls", 20)
        assert samples['liveroom_polls_total{outcome="first"}'] == 20
        assert samples["liveroom_asyncio_tasks"] > 0
        # Each worker's own figure, from its own file: both hold some of them.
        directory = metrics_dir_of(next(iter(running.workers().values())))
        held = {}
        for pid in running.workers().values():
            merged = MultiProcessCollector.merge(  # type: ignore[no-untyped-call]
                [str(directory / f"gauge_livesum_{pid}.db")])
            held[pid] = next(s.value for m in merged for s in m.samples
                             if s.name == "liveroom_held_polls")
        assert sum(held.values()) == 20
        assert all(count > 0 for count in held.values()), held

        await send(session, running.url, "m", "wake")
        answers = await asyncio.wait_for(asyncio.gather(*polls), 20)
        assert all(a["messages"][0]["body"] == "wake" for a in answers)
        assert len(firsts) == 20
        samples = await scrape_until(session, running.url, "liveroom_held_polls", 0)
        assert samples['liveroom_delivered_messages_total{kind="normal"}'] == 20


def test_a_scrape_while_a_worker_starts_skips_the_files_it_has_not_sized(
        tmp_path: Path) -> None:
    """A worker opens each of its files (0 bytes) before it sizes it; a scrape
    in between read it and answered 500 (seen once in CI while a killed worker
    came back). Forced here: a worker that has counted, and one whose files
    are open but empty."""
    counted = MmapedDict(str(tmp_path / "counter_100.db"))  # type: ignore[no-untyped-call]
    counted.write_value(  # type: ignore[no-untyped-call]
        mmap_key("liveroom_polls", "liveroom_polls_total", ["outcome"], ["first"],
                 "Polls answered"), 3.0, 0.0)
    counted.close()  # type: ignore[no-untyped-call]
    (tmp_path / "counter_101.db").touch()
    (tmp_path / "gauge_livesum_101.db").touch()
    registry = CollectorRegistry()
    registry.register(WorkerFiles(str(tmp_path)))
    text = generate_latest(registry).decode()
    assert 'liveroom_polls_total{outcome="first"} 3.0' in text


# -- restarts and stopping ---------------------------------------------------------

async def test_a_killed_worker_is_restarted_and_service_goes_on(tmp_path: Path,
                                                                 redis_url: str) -> None:
    async with supervisor(tmp_path, "--store", redis_url) as running, fresh() as session:
        listener = Listener(session, "k")
        await listener.poll(running.url)
        before = running.workers()
        victim_id = sorted(before)[0]
        os.kill(before[victim_id], signal.SIGKILL)
        # Connections waiting in a dying worker's accept queue are reset (a
        # client retries those); once it is gone, every new one goes to the other.
        async with asyncio.timeout(10):
            while alive(before[victim_id]):
                await asyncio.sleep(0.01)
        for i in range(10):
            await send(session, running.url, "k", i)
            await listener.poll(running.url, timeout=5)
        after = await running.wait_workers(2, besides={before[victim_id]})
        assert set(after) == set(before)
        assert after[victim_id] != before[victim_id]
        await scrape_until(session, running.url, "liveroom_workers", 2)
        for i in range(10, 20):
            await send(session, running.url, "k", i)
        async with asyncio.timeout(20):
            while len(listener.received) < 20:
                await listener.poll(running.url, timeout=2)
        check_delivery(listener, 20)
        log = running.stderr.read_text()
        assert f"worker {victim_id} killed by SIGKILL" in log
        assert "Traceback" not in log


async def test_a_worker_that_keeps_dying_is_restarted_ever_later(tmp_path: Path,
                                                                 redis_url: str) -> None:
    async with supervisor(tmp_path, "--store", redis_url) as running:
        workers = running.workers()
        victim_id = sorted(workers)[1]
        gone = {workers[victim_id]}
        for _ in range(3):
            os.kill(workers[victim_id], signal.SIGKILL)
            workers = await running.wait_workers(2, besides=gone)
            gone.add(workers[victim_id])
        delays = re.findall(rf"worker {re.escape(victim_id)} killed by SIGKILL after "
                            r"\S+ s; restarting it in (\S+) s", running.stderr.read_text())
        assert delays == ["0.5", "1", "2"]


async def test_sigterm_answers_held_polls_and_stops_every_worker(tmp_path: Path,
                                                                 redis_url: str) -> None:
    async with supervisor(tmp_path, "--store", redis_url) as running, \
            fresh() as session, aiohttp.ClientSession() as holders:
        workers = running.workers()
        directory = metrics_dir_of(next(iter(workers.values())))
        firsts, polls = await hold(holders, running.url, "s", 20)
        await scrape_until(session, running.url, "liveroom_held_polls", 20)
        running.proc.send_signal(signal.SIGTERM)
        answers = await asyncio.wait_for(asyncio.gather(*polls), 20)
        assert await asyncio.wait_for(running.proc.wait(), 30) == 0
        for first, answer in zip(firsts, answers, strict=True):
            assert answer["messages"] == answer["important"] == []
            assert (answer["epoch"], answer["seq"]) == (first["epoch"], first["seq"])
        assert not any(alive(pid) for pid in workers.values())
        assert not directory.exists()
        assert "Traceback" not in running.stderr.read_text()


async def test_sigint_stops_like_sigterm(tmp_path: Path, redis_url: str) -> None:
    async with supervisor(tmp_path, "--store", redis_url) as running:
        workers = running.workers()
        running.proc.send_signal(signal.SIGINT)  # Ctrl-C
        assert await asyncio.wait_for(running.proc.wait(), 30) == 0
        assert not any(alive(pid) for pid in workers.values())
        assert "Traceback" not in running.stderr.read_text()


async def test_a_second_signal_kills_workers_that_do_not_stop(tmp_path: Path,
                                                              redis_url: str) -> None:
    """A worker that does not stop (here frozen with SIGSTOP) holds the stop up
    to the 15 s deadline; a second Ctrl-C kills it at once."""
    async with supervisor(tmp_path, "--store", redis_url) as running:
        workers = running.workers()
        frozen = next(iter(workers.values()))
        os.kill(frozen, signal.SIGSTOP)
        try:
            running.proc.send_signal(signal.SIGINT)
            with pytest.raises(TimeoutError):  # held up by the frozen worker
                await asyncio.wait_for(asyncio.shield(running.proc.wait()), 2)
            assert alive(frozen)
            running.proc.send_signal(signal.SIGINT)
            assert await asyncio.wait_for(running.proc.wait(), 5) == 0
            assert not any(alive(pid) for pid in workers.values())
            assert "second signal: killing the workers" in running.stderr.read_text()
        finally:
            with suppress(ProcessLookupError):
                os.kill(frozen, signal.SIGKILL)


async def test_workers_that_do_not_stop_are_killed_after_the_deadline(
        redis_url: str) -> None:
    """The supervisor waits ``stop_timeout`` (15 s by default; 1 s here) for
    its workers, then kills what is left and returns."""
    sup = Supervisor(Settings(port=0, store=redis_url, **SECRETS), 2, stop_timeout=1.0)
    running = asyncio.create_task(sup.run())
    try:
        async with asyncio.timeout(30):
            while not sup._announced:
                await asyncio.sleep(0.05)
        pids = [slot.proc.pid for slot in sup._slots if slot.proc is not None]
        os.kill(pids[0], signal.SIGSTOP)
        loop = asyncio.get_running_loop()
        started = loop.time()
        sup._on_signal()  # what SIGTERM does
        assert await asyncio.wait_for(running, 10) == 0
        took = loop.time() - started
        assert 1.0 <= took < 5, took  # the deadline, then the kill
        assert not any(alive(pid) for pid in pids)
    finally:
        if not running.done():
            running.cancel()


async def test_workers_stop_when_the_supervisor_is_killed(tmp_path: Path,
                                                          redis_url: str) -> None:
    async with supervisor(tmp_path, "--store", redis_url) as running:
        workers = running.workers()
        directory = metrics_dir_of(next(iter(workers.values())))
        running.proc.kill()
        await running.proc.wait()
        try:
            async with asyncio.timeout(15):
                while any(alive(pid) for pid in workers.values()):
                    await asyncio.sleep(0.05)
        finally:
            shutil.rmtree(directory, ignore_errors=True)  # the supervisor could not


async def test_a_worker_that_cannot_start_stops_everything(
        redis_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    class Broken(Supervisor):
        def _order(self, slot: Any) -> bytes:
            return b"not settings" if slot.index == 2 else super()._order(slot)

    settings = Settings(port=0, store=redis_url, **SECRETS)
    code = await asyncio.wait_for(Broken(settings, 2).run(), 30)
    assert code == 1
    out, err = capsys.readouterr()
    assert "listening on" not in out
    assert re.search(r"liveroom: worker 127\.0\.0\.1:\d+#2 exit status 1 before listening", err)


# -- refusals --------------------------------------------------------------------

@pytest.mark.parametrize(("args", "env"), [
    pytest.param(["serve", "--workers", "2"], {}, id="flag"),
    pytest.param(["serve"], {"LIVEROOM_WORKERS": "3"}, id="env"),
    pytest.param(["serve", "--workers", "2", "--store", "memory://"], {}, id="memory-url"),
])
def test_more_than_one_worker_needs_a_shared_store(args: list[str],
                                                   env: dict[str, str]) -> None:
    result = CliRunner().invoke(main, args, env=env)
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert "--workers" in text
    assert "the memory store lives inside one process" in text
    assert "Traceback" not in result.output


@pytest.mark.parametrize("value", ["0", "-1", "many", "257"])
def test_a_bad_worker_count_is_refused(value: str) -> None:
    result = CliRunner().invoke(main, ["serve", "--workers", value])
    assert result.exit_code == 2, result.output
    assert "--workers: " in result.output
    assert value in result.output


def test_workers_auto_is_one_per_core(monkeypatch: pytest.MonkeyPatch) -> None:
    # A machine of three cores, whatever this one has: auto is three workers
    # (and three need a shared store).
    monkeypatch.setattr(os, "cpu_count", lambda: 3)
    result = CliRunner().invoke(main, ["serve", "--workers", "auto"])
    assert result.exit_code == 2, result.output
    assert "3 workers need a store they can share" in " ".join(result.output.split())


def test_serve_help_explains_workers() -> None:
    text = " ".join(CliRunner().invoke(main, ["serve", "--help"]).output.split())
    assert "--workers N|auto" in text
    assert "env var: LIVEROOM_WORKERS" in text
    assert "SO_REUSEPORT" in text


def test_a_port_in_use_is_a_clear_failure(redis_url: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(main, ["serve", "--workers", "2", "--port", str(port),
                                           "--store", redis_url], env=TOKENS)
    assert result.exit_code == 1, result.output
    assert f"cannot listen on 127.0.0.1:{port}" in result.output
    assert "Traceback" not in result.output


async def test_a_port_served_by_another_supervisors_workers_is_refused(
        tmp_path: Path, redis_url: str) -> None:
    """Their sockets share the port with SO_REUSEPORT: joining them would split
    traffic silently between two stores. The second supervisor refuses."""
    async with supervisor(tmp_path, "--store", redis_url) as running:
        second = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "liveroom", "serve", "--workers", "2",
            "--port", str(running.port), "--store", redis_url,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env=clean_env(**TOKENS))
        stdout, stderr = await asyncio.wait_for(second.communicate(), 30)
        assert second.returncode == 1, stderr
        assert f"cannot listen on 127.0.0.1:{running.port}" in stderr.decode()
        assert b"listening on" not in stdout
        async with fresh() as session, session.get(f"{running.url}/healthz") as resp:
            assert resp.status == 200  # the first is untouched


async def test_metrics_directories_of_dead_supervisors_are_swept_at_start(
        tmp_path: Path, redis_url: str) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = temp / f"liveroom-metrics-{dead.pid}-abcd"
    alive = temp / f"liveroom-metrics-{os.getpid()}-efgh"
    other = temp / "something-else"
    for path in (stale, alive, other):
        path.mkdir()
        (path / "counter_1.db").write_bytes(b"x")
    env = clean_env(**TOKENS, TMPDIR=str(temp))
    async with supervisor(tmp_path, "--store", redis_url, env=env):
        assert not stale.exists()
        assert alive.exists()
        assert other.exists()
        ours = [p for p in temp.iterdir() if p.name.startswith("liveroom-metrics-")
                and p != alive]
        assert len(ours) == 1  # the running supervisor's own
    assert not ours[0].exists()  # removed when it stopped


async def test_the_real_command_refuses_the_memory_store() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "liveroom", "serve", "--workers", "2",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=clean_env())
    stdout, stderr = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 2
    assert "memory store lives inside one process" in " ".join(stderr.decode().split())
    assert stdout == b""


def test_a_forked_worker_draws_its_own_epochs() -> None:
    """Epochs come from a generator seeded once per process (no system call per
    epoch); a worker forked from the supervisor reseeds it, or two workers
    could give two new rooms the same epoch."""
    from liveroom.store.base import new_epoch

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next epoch, then gone
        os.write(write, new_epoch().encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    child = os.read(read, 64).decode()
    os.close(read)
    assert child != new_epoch()  # the parent's next draw: the child's own without a reseed
